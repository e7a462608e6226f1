// hydra: the HydraHead command-line tool. Dispatches to the subcommands in cli/cmd_*.cpp and turns
// every hydra::Error into one line on stderr and exit code 1.
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"hydra: head-level attention hybridization (HydraHead) for pretrained LLMs"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "hydra 0.1.0");
    hydra::cli::register_info(app);
    hydra::cli::register_tokenize(app);
    hydra::cli::register_generate(app);
    hydra::cli::register_ppl(app);
    hydra::cli::register_train(app);
    hydra::cli::register_convert(app);
    hydra::cli::register_distill(app);
    hydra::cli::register_pipeline(app);
    hydra::cli::register_demo(app);
    hydra::cli::register_score_heads(app);
    hydra::cli::register_eval(app);
    hydra::cli::register_corpus(app);
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
