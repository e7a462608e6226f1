// `hydra analyze` end to end (see analysis.h): inputs checked, models and tokens loaded, the layer
// similarity run, the report written.
#include "interp/analysis.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "eval/model_text_encoder.h"
#include "interp/analysis_report.h"
#include "interp/head_spread.h"
#include "interp/layer_similarity.h"
#include "io/bounded_parse.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "train/token_shards.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

// Text files are read whole; past this they are not "a held-out text" but a corpus: build shards.
constexpr size_t kMaxTextBytes = size_t(1) << 30;

void check_request(const AnalyzeRequest& r) {
    HYDRA_CHECK(r.device == "cpu" || r.device == "cuda", "--device {}: expected cpu or cuda", r.device);
    HYDRA_CHECK(r.device == "cpu",
                "--device cuda: not available for hydra analyze; the GPU forward (gpu/gpu_forward.h) returns "
                "logits only and exposes no per-layer hidden states, so the analysis runs on the CPU "
                "(--device cpu)");
    HYDRA_CHECK(r.text.empty() != r.shards.empty(),
                "give exactly one token source: --text FILE or --shards DIR (the held-out split is used)");
    HYDRA_CHECK(r.tokens >= 1, "--tokens {}: must be at least 1", r.tokens);
    HYDRA_CHECK(r.window >= 2, "--window {}: must be at least 2", r.window);
    HYDRA_CHECK(r.skip_first >= 0 && r.skip_first < r.window,
                "--skip-first {}: must be at least 0 and below --window ({})", r.skip_first, r.window);
    HYDRA_CHECK(std::isfinite(r.block_threshold) && r.block_threshold > -1 && r.block_threshold <= 1,
                "--block-threshold {}: must lie in (-1, 1]", r.block_threshold);
    if (!r.text.empty()) HYDRA_CHECK(fs::is_regular_file(r.text), "--text {}: no such file", r.text);
    if (!r.shards.empty())
        HYDRA_CHECK(fs::is_regular_file(fs::path(r.shards) / "index.json"),
                    "--shards {}: no index.json there (build shards with hydra train first)", r.shards);
    if (!r.scores.empty())
        HYDRA_CHECK(fs::is_regular_file(r.scores), "--scores {}: cannot open the scores file (no such file)",
                    r.scores);
    HYDRA_CHECK(!r.out.empty(), "--out: an empty path");
    HYDRA_CHECK(!fs::exists(r.out) || fs::is_directory(r.out), "--out {}: exists and is not a directory",
                r.out);
}

// The first `count` tokens of the source, or an error saying how many it holds.
std::vector<int32_t> read_tokens(const AnalyzeRequest& r, const ModelText& text) {
    std::vector<int32_t> ids;
    std::string what;
    if (!r.text.empty()) {
        const std::string bytes = read_file_limited(r.text, kMaxTextBytes, "the --text file");
        HYDRA_CHECK(!bytes.empty(), "--text {}: the file is empty", r.text);
        ids = text.encoder->encode(bytes);
        what = fmt::format("--text {} holds {} tokens", r.text, ids.size());
    } else {
        const TokenShards shards = open_token_shards(r.shards, text.encoder.get());
        const int64_t have = shards.heldout.size();
        HYDRA_CHECK(have >= r.tokens,
                    "--tokens {}: the held-out split of --shards {} holds {} tokens; use --tokens {} or less",
                    r.tokens, r.shards, have, have);
        ids.resize(size_t(r.tokens));
        shards.heldout.read(0, r.tokens, ids.data());
        return ids;
    }
    HYDRA_CHECK(int64_t(ids.size()) >= r.tokens, "--tokens {}: {}; use --tokens {} or less", r.tokens, what,
                ids.size());
    ids.resize(size_t(r.tokens));
    return ids;
}

}  // namespace

AnalyzeResult run_analysis(const AnalyzeRequest& r, const std::function<void(int64_t, int64_t)>& progress) {
    check_request(r);
    LoadedModel m = load_model(r.model);
    const ModelConfig& cfg = m.model->config();
    const ModelText text = model_text_for(r.model, m.vocab, cfg.eos_token_ids);

    AnalysisReport rep;
    rep.config = cfg;
    rep.model_source = r.model;
    rep.la_heads = m.model->plan().total_la_heads();
    rep.window = r.window;
    rep.skip_first = r.skip_first;
    rep.bos_id = text.bos_id;
    rep.block_threshold = r.block_threshold;
    LayerSimilarityOptions so;
    so.window = r.window;
    so.skip_first = r.skip_first;
    so.bos_id = text.bos_id;
    const int64_t rows = counted_rows(r.tokens, so);
    HYDRA_CHECK(
        rows >= 4,
        "--tokens {}: windows of {} with --skip-first {} leave {} counted positions; CKA needs at least 4",
        r.tokens, r.window, r.skip_first, rows);

    if (!r.scores.empty()) {
        rep.has_scores = true;
        rep.scores_source = r.scores;
        rep.scores = load_head_scores(r.scores, cfg);
        rep.spread = head_spread(rep.scores.heads);
    }
    std::optional<LoadedModel> teacher;
    if (!r.teacher.empty()) {
        teacher = load_model(r.teacher);
        const ModelConfig& tc = teacher->model->config();
        HYDRA_CHECK(
            tc.num_layers == cfg.num_layers && tc.hidden_size == cfg.hidden_size &&
                tc.vocab_size == cfg.vocab_size,
            "--teacher {} ({} layers, hidden size {}, vocabulary {}) does not match {} ({} layers, hidden "
            "size {}, vocabulary {}): the layer-by-layer comparison needs a hybrid of this teacher",
            r.teacher, tc.num_layers, tc.hidden_size, tc.vocab_size, r.model, cfg.num_layers, cfg.hidden_size,
            cfg.vocab_size);
        const ModelText ttext = model_text_for(r.teacher, teacher->vocab, tc.eos_token_ids);
        HYDRA_CHECK(
            ttext.name() == text.name() && ttext.bos_id == text.bos_id,
            "--teacher {}: its tokenizer ({}) is not the model's ({}); both must read the same tokens",
            r.teacher, ttext.name(), text.name());
        rep.teacher_source = r.teacher;
    }
    const std::vector<int32_t> ids = read_tokens(r, text);
    rep.data_kind = r.text.empty() ? "shards" : "text";
    rep.data_path = r.text.empty() ? r.shards : r.text;

    rep.similarity = layer_similarity(*m.model, teacher ? teacher->model.get() : nullptr, ids, so, progress);
    rep.blocks = similarity_blocks(rep.similarity.cka, r.block_threshold);

    std::error_code ec;
    fs::create_directories(r.out, ec);
    HYDRA_CHECK(!ec && fs::is_directory(r.out), "--out {}: cannot create the directory ({})", r.out,
                ec.message());
    AnalyzeResult result;
    result.report = analysis_json(rep);
    result.files = write_analysis(r.out, rep);
    return result;
}

}  // namespace hydra
