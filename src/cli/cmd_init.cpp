// `hydra init CONFIG.json --out DIR`: a model directory with random weights of the shapes a Hugging
// Face config.json names (Llama, Qwen2, Qwen3), for throughput and memory work at real shapes
// without downloading weights, and as the start of from-scratch training.
#include <chrono>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/dir_kind.h"
#include "model/hf_config.h"
#include "model/hybrid_plan.h"
#include "model/llama_model.h"
#include "model/model_directory.h"
#include "model/weight_init.h"

namespace fs = std::filesystem;

namespace hydra::cli {

namespace {

struct InitOptions {
    std::string config, out, tokenizer;
    double std = 0;  // 0: the config's initializer_range, else 0.02
    uint64_t seed = 0;
    bool force = false;
};

// initializer_range from config.json when present (the value transformers initialises with).
double config_init_std(const std::string& config_path) {
    const nlohmann::json j = try_parse_json_bounded(read_text_file(config_path)).value_or(nlohmann::json());
    if (j.is_object() && j.contains("initializer_range") && j["initializer_range"].is_number()) {
        const double s = j["initializer_range"].get<double>();
        HYDRA_CHECK(s > 0 && s < 10, "{}: initializer_range {} is not a usable standard deviation",
                    config_path, s);
        return s;
    }
    return 0.02;
}

}  // namespace

void register_init(CLI::App& app) {
    auto* o = new InitOptions;
    auto* cmd = app.add_subcommand("init", "Make a model directory with random weights from a config.json");
    cmd->add_option("CONFIG", o->config, "a Hugging Face config.json (llama, qwen2, qwen3)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("--out", o->out, "output model directory")->required();
    cmd->add_option("--seed", o->seed, "weight seed")->capture_default_str();
    cmd->add_option("--std", o->std,
                    "standard deviation of the matrices (default: initializer_range, else 0.02)")
        ->check(CLI::Range(0.0, 10.0));
    cmd->add_option("--tokenizer", o->tokenizer, "a tokenizer.json to store with the model")
        ->check(CLI::ExistingFile);
    cmd->add_flag("--force", o->force,
                  "replace --out even when it is not a hydra model directory (deletes it)");
    cmd->callback([o] {
        const ModelConfig cfg = load_hf_config(o->config);  // validates sizes and names the file
        const double std = o->std > 0 ? o->std : config_init_std(o->config);
        const ClaimedDir out = claim_output_dir(o->out, model_dir_kind(), o->force);
        for (const std::string& note : out.notes) fmt::print(stderr, "hydra: {}\n", note);
        const auto t0 = std::chrono::steady_clock::now();
        LlamaModel model(cfg);
        Rng rng(o->seed);
        init_weights_normal(model, std, rng);
        std::map<std::string, std::string> files;
        if (!o->tokenizer.empty()) files["tokenizer.json"] = read_text_file(o->tokenizer);
        nlohmann::json extra;
        extra["initialised"] = {
            {"config", fs::absolute(o->config).string()}, {"seed", o->seed}, {"std", std}};
        save_model_directory(out.path.string(), model, extra, files);
        const int64_t n = model.params().parameter_count();
        const HybridPlan plan = HybridPlan::all_fa(cfg);
        fmt::print("model        {} ({})\n", cfg.name, cfg.architecture);
        fmt::print("parameters   {} ({:.1f}M), N(0, {}) seed {}\n", n, double(n) / 1e6, std, o->seed);
        fmt::print("layers       {} x (hidden {}, ffn {}, {} query / {} kv heads of {})\n", cfg.num_layers,
                   cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        fmt::print("KV cache     {} bytes/token bf16\n", plan.kv_bytes_per_token(cfg, 2));
        fmt::print("wrote        {} in {:.1f} s\n", out.path.string(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    });
}

}  // namespace hydra::cli
