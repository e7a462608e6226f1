// `hydra ppl MODEL --text FILE [--ctx N]`: perplexity on a text file, in windows of N tokens.
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_load_report.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "eval/perplexity.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::cli {

namespace {
struct PplOptions {
    std::string model = default_model_path();
    std::string text;
    int64_t ctx = 512;
    int64_t max_windows = 0;
    int threads = 0;
};
}  // namespace

void register_ppl(CLI::App& app) {
    auto* o = new PplOptions;
    auto* cmd = app.add_subcommand("ppl", "Perplexity of a model on a text file");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory")->capture_default_str();
    cmd->add_option("--text", o->text, "UTF-8 text file to score")->required();
    cmd->add_option("--ctx", o->ctx, "window length in tokens")->capture_default_str()->check(CLI::Range(2, 1 << 20));
    cmd->add_option("--max-windows", o->max_windows, "score at most this many windows (0 = all)")
        ->check(at_least(0));
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        std::ifstream in(o->text, std::ios::binary);
        HYDRA_CHECK(in.good(), "{}: cannot open the text file", o->text);
        std::stringstream buf;
        buf << in.rdbuf();
        const std::string text = buf.str();
        HYDRA_CHECK(!text.empty(), "{}: the text file is empty", o->text);
        LoadedModel m = load_model_reported(o->model);
        HYDRA_CHECK(m.vocab.has_value(), "{}: the model has no tokenizer", o->model);
        // Positions past the model's context are extrapolation (and memory): refused. RoPE scaling declares
        // the scaled context in max_position_embeddings, except dynamic NTK, which scales past it by factor.
        const ModelConfig& mc = m.model->config();
        const int64_t trained = mc.rope_scaling.type == RopeType::Dynamic
                                    ? int64_t(double(mc.max_position_embeddings) * mc.rope_scaling.factor)
                                    : mc.max_position_embeddings;
        HYDRA_CHECK(trained <= 0 || o->ctx <= trained,
                    "--ctx {}: above the model's context of {} tokens ({}); use --ctx {} or less", o->ctx,
                    trained, o->model, trained);
        Tokenizer tok(*m.vocab);
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<int32_t> ids = tok.encode(text, false);
        fmt::print(stderr, "{}: {} bytes -> {} tokens\n", o->text, text.size(), ids.size());
        int64_t total = (int64_t(ids.size()) + o->ctx - 1) / o->ctx;
        if (o->max_windows > 0) total = std::min(total, o->max_windows);
        ProgressBar bar("ppl", total, "win");
        PerplexityResult r = perplexity(*m.model, ids, o->ctx, o->max_windows, [&](int64_t done, int64_t, double p) {
            bar.update(done, fmt::format("ppl {:.3f}", p));
        });
        bar.finish(fmt::format("ppl {:.3f}", r.ppl()));
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print("perplexity {:.4f} over {} predicted tokens in {} windows of {} (ctx {}), {:.1f} s, {:.0f} tok/s\n",
                   r.ppl(), r.predicted, r.windows, o->ctx, o->ctx, s, double(r.predicted) / s);
    });
}

}  // namespace hydra::cli
