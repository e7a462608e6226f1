// hydra: the HydraHead command-line tool. Dispatches to the subcommands in cli/cmd_*.cpp and turns
// every hydra::Error into one line on stderr and exit code 1.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

// OpenMP's waiting threads: libgomp's default spins ~300,000 times at every barrier before it sleeps, so
// on a core shared with other work a waiting thread burns the time slice the thread it waits for needs
// (SmolLM2 decoding on 2 cores: 2.2 tok/s beside eight busy loops); the passive policy sleeps at once, and
// a decode step's 100-odd barriers then each wait for a sleeping core to wake (124 tok/s on a quiet
// machine against 334). A thousand spins keep the quiet figure and bound the loaded one (28 beside eight
// busy loops, passive 47). libgomp reads the setting once, when it starts: `hydra` sets it, unless the
// caller chose OMP_WAIT_POLICY or GOMP_SPINCOUNT, and starts over (returns whether it set it).
bool bound_spin_waits() {
    if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return false;
    return setenv("GOMP_SPINCOUNT", "1000", 1) == 0;
}

}  // namespace

int main(int argc, char** argv) {
    const bool restart_for_spin = bound_spin_waits();
    hydra::ensure_blas_kernels(argv);                 // may start over itself, with the setting above
    if (restart_for_spin) hydra::restart_self(argv);  // returns only on failure: then run as we are
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
