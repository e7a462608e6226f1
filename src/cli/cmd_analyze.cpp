// `hydra analyze MODEL [--teacher TEACHER] (--text FILE | --shards DIR) [--tokens N] [--scores scores.json]
// [--out DIR]`: layer-to-layer CKA of the residual stream, the spread of head scores within layers, and a
// hybrid's per-layer distance from its teacher (interp/analysis.h), as analysis.json and PNG figures.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "interp/analysis.h"

namespace hydra::cli {

namespace {

// The few numbers worth reading on the terminal; the rest is in analysis.json.
void print_summary(const nlohmann::json& j) {
    const auto& d = j["data"];
    const auto& c = j["layer_cka"];
    fmt::print("{} tokens in {} windows, {} positions counted; layer CKA in {:.1f} s\n",
               d["tokens"].get<int64_t>(), d["windows"].get<int64_t>(), d["rows"].get<int64_t>(),
               c["seconds"].get<double>());
    std::string adj;
    for (const auto& v : c["adjacent"]) adj += v.is_null() ? " -" : fmt::format(" {:.2f}", v.get<double>());
    fmt::print("adjacent-layer CKA:{}\n", adj);
    std::string blocks;
    for (const auto& b : c["blocks"])
        blocks += fmt::format(" [{}-{}]", b[0].get<int64_t>(), b[1].get<int64_t>());
    fmt::print("blocks at CKA >= {}:{}\n", c["block_threshold"].get<double>(), blocks);
    if (j.contains("head_scores")) {
        std::string top;
        for (const auto& l : j["head_scores"]["layers"])
            top += l["top_share"].is_null() ? " -" : fmt::format(" {:.2f}", l["top_share"].get<double>());
        fmt::print("top-head share per layer:{}\n", top);
        const auto& w = j["head_scores"]["within_layer_share"];
        if (!w.is_null()) fmt::print("share of score variance within layers: {:.3f}\n", w.get<double>());
    }
    if (j.contains("teacher")) {
        auto value = [](const nlohmann::json& v) {
            return v.is_null() ? std::string("-") : fmt::format("{:.3g}", v.get<double>());
        };
        std::string far;
        for (const auto& l : j["teacher"]["furthest"]) {
            const size_t i = l.get<size_t>();
            far += fmt::format(" L{} (CKA {}, rel. MSE {})", i, value(j["teacher"]["cka"][i]),
                               value(j["teacher"]["rel_mse"][i]));
        }
        fmt::print("furthest from the teacher:{}\n", far);
    }
}

}  // namespace

void register_analyze(CLI::App& app) {
    auto* o = new AnalyzeRequest;
    auto* threads = new int(0);
    o->model = default_model_path();
    auto* cmd = app.add_subcommand("analyze",
                                   "Layer-to-layer CKA, head-score spread within layers, and a hybrid's "
                                   "per-layer distance from its teacher");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory (teacher or hybrid)")
        ->capture_default_str();
    cmd->add_option("--teacher", o->teacher,
                    "the teacher MODEL was converted from: per-layer CKA and MSE against it");
    cmd->add_option("--text", o->text, "held-out UTF-8 text to run (tokenized with MODEL's tokenizer)");
    cmd->add_option("--shards", o->shards, "token shards directory: its held-out split is used");
    cmd->add_option("--tokens", o->tokens, "tokens to run")->capture_default_str()->check(at_least(1));
    cmd->add_option("--window", o->window, "tokens per forward (each window starts a fresh cache)")
        ->capture_default_str()
        ->check(at_least(2));
    cmd->add_option("--skip-first", o->skip_first,
                    "positions at the start of each window left out of the statistics (the attention sink)")
        ->capture_default_str()
        ->check(at_least(0));
    cmd->add_option("--scores", o->scores,
                    "scores.json of hydra score-heads: the spread of head scores per layer");
    cmd->add_option("--block-threshold", o->block_threshold,
                    "consecutive layers whose pairwise CKA is at least this form one block")
        ->capture_default_str();
    cmd->add_option("--out", o->out, "output directory (analysis.json and PNG figures)")
        ->capture_default_str();
    cmd->add_option("--device", o->device, "cpu (cuda: not available, the GPU forward has no per-layer taps)")
        ->capture_default_str();
    add_threads_option(*cmd, *threads);
    cmd->callback([o, threads] {
        apply_threads(*threads);
        ProgressBar bar("analyze", 1, "win");
        bool started = false;
        AnalyzeResult r = run_analysis(*o, [&](int64_t done, int64_t total) {
            if (!started) bar = ProgressBar("analyze", total, "win"), started = true;
            bar.update(done, "");
        });
        bar.finish("done");
        print_summary(r.report);
        for (const std::string& f : r.files) fmt::print("wrote {}\n", f);
    });
}

}  // namespace hydra::cli
