// hydra: the HydraHead command-line tool. Dispatches to the subcommands in cli/cmd_*.cpp and turns
// every hydra::Error into one line on stderr and exit code 1.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/blas_kernels.h"
#include "core/closest_name.h"
#include "core/error.h"
#include "core/restart_self.h"

namespace {

// `hydra demo` is meant for a 2-core machine shared with other work. There OpenMP's default of spinning
// at every barrier lets a waiting thread burn the time slice the thread it waits for needs (SmolLM2
// decoding ran 17x slower with ~16 runnable processes on 2 cores). libgomp reads its wait policy once,
// when it starts, so the demo restarts itself once with OMP_WAIT_POLICY=passive unless the caller chose
// a policy.
void demo_wait_policy(int argc, char** argv) {
    if (argc < 2 || std::strcmp(argv[1], "demo") != 0 || std::getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    hydra::restart_self(argv);  // returns only on failure: then run as we are
}

}  // namespace

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    demo_wait_policy(argc, argv);
    CLI::App app{"hydra: head-level attention hybridization (HydraHead) for pretrained LLMs", "hydra"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "hydra 0.1.0");
    hydra::cli::register_info(app);
    hydra::cli::register_tokenize(app);
    hydra::cli::register_generate(app);
    hydra::cli::register_ppl(app);
    hydra::cli::register_train(app);
    hydra::cli::register_convert(app);
    hydra::cli::register_init(app);
    hydra::cli::register_distill(app);
    hydra::cli::register_pipeline(app);
    hydra::cli::register_demo(app);
    hydra::cli::register_score_heads(app);
    hydra::cli::register_eval(app);
    hydra::cli::register_report(app);
    hydra::cli::register_analyze(app);
    hydra::cli::register_corpus(app);
    hydra::cli::register_serve(app);
    // No command: the help, not CLI11's one-liner. A mistyped command: say so, with the nearest one (CLI11
    // would report the command as missing, the typo as an unexpected argument).
    if (argc < 2) {
        std::fputs(app.help().c_str(), stdout);
        return 1;
    }
    if (argv[1][0] != '-') {
        std::vector<std::string> names;
        for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
            names.push_back(sub->get_name());
        if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
            const std::optional<std::string> meant = hydra::closest_name(argv[1], names);
            fmt::print(stderr, "hydra: error: unknown command '{}'{}; `hydra --help` lists the commands\n",
                       argv[1], meant ? fmt::format(" (did you mean '{}'?)", *meant) : "");
            return 1;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const hydra::Error& e) {
        std::fflush(stdout);
        fmt::print(stderr, "hydra: error: {}\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        fmt::print(stderr, "hydra: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hydra: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
