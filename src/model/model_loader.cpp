// Format detection and loading for load_model (see model_loader.h).
#include "model/model_loader.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/gguf.h"
#include "model/hf_config.h"
#include "io/safetensors.h"
#include "model/gguf_import.h"
#include "model/model_directory.h"
#include "tokenizer/vocab_from_gguf.h"
#include "tokenizer/vocab_from_tokenizer_json.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

LoadedModel load_hf_directory(const std::string& dir) {
    LoadedModel out;
    out.source = dir;
    out.format = "hf-safetensors";
    const std::string config_path = (fs::path(dir) / "config.json").string();
    ModelConfig cfg = load_hf_config(config_path);
    if (cfg.name.empty()) cfg.name = fs::path(dir).filename().string();
    // A hydra checkpoint or converted hybrid names its plan under "hydra"; plain HF models are teachers.
    std::optional<HybridPlan> plan;
    nlohmann::json hydra_section;
    {
        const nlohmann::json root = parse_json_bounded(
            read_file_limited(config_path, kMaxConfigBytes, "the model config"), config_path);
        if (root.is_object() && root.contains("hydra") && root["hydra"].is_object()) hydra_section = root["hydra"];
    }
    if (hydra_section.contains("plan")) plan = HybridPlan::from_json(hydra_section["plan"], cfg, config_path + ": hydra.plan");
    SafetensorsShards shards = SafetensorsShards::open_dir(dir);
    check_weights_cover_config(cfg, shards, config_path);  // before the parameters are allocated
    out.model = std::make_unique<LlamaModel>(cfg, plan ? &*plan : nullptr);
    for (const ArenaEntry& e : out.model->params().entries()) {
        const SafetensorsTensorInfo& info = shards.tensor(e.name);
        HYDRA_CHECK(info.shape == e.shape, "{}: tensor '{}' has shape {}, expected {} from config.json", dir, e.name,
                    shape_str(info.shape), shape_str(e.shape));
        Tensor src = shards.to_f32(e.name);
        Tensor dst = out.model->params().get(e.name);
        std::copy(src.f32(), src.f32() + src.numel(), dst.f32());
        out.tensor_types[std::string(st_dtype_name(info.dtype))]++;
    }
    out.vocab = load_vocab(dir);
    return out;
}

}  // namespace

LoadedModel load_model(const std::string& given) {
    // A model directory whose save was cut by a crash is recovered first (atomic_dir.h).
    const std::string path = settle_directory_for_reading(given);
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    HYDRA_CHECK(fs::exists(st), "{}: no such file or directory (expected a .gguf file or a model directory)", path);
    if (fs::is_directory(st)) {
        HYDRA_CHECK(fs::exists(fs::path(path) / "config.json"),
                    "{}: directory has no config.json (expected a Hugging Face model directory)", path);
        return load_hf_directory(path);
    }
    GgufFile gguf = GgufFile::open(path);
    LoadedModel out;
    out.source = path;
    out.format = "gguf";
    out.model = load_llama_from_gguf(gguf, &out.tensor_types);
    if (gguf.has("tokenizer.ggml.model")) out.vocab = vocab_from_gguf(gguf);
    return out;
}

std::optional<TokenizerVocab> load_vocab(const std::string& path) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    HYDRA_CHECK(fs::exists(st), "{}: no such file or directory (expected a .gguf file or a model directory)", path);
    if (fs::is_directory(st)) {
        const fs::path tok = fs::path(path) / "tokenizer.json";
        if (!fs::exists(tok)) return std::nullopt;
        return vocab_from_tokenizer_json(tok.string());
    }
    GgufFile gguf = GgufFile::open(path);
    if (!gguf.has("tokenizer.ggml.model")) return std::nullopt;
    return vocab_from_gguf(gguf);
}

}  // namespace hydra
