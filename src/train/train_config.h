// TrainConfig: every setting of `hydra train`, from a preset, a JSON or TOML file, and key=value
// overrides, in that order. Keys are dotted ("optim.lr"); files may nest them as tables/objects.
// An unknown key or a value of the wrong type is an error naming the key, where it came from and
// what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace hydra {

struct TrainConfig {
    // model (a llama-family decoder trained from scratch)
    int64_t hidden_size = 256;
    int64_t num_layers = 8;
    int64_t num_heads = 8;
    int64_t num_kv_heads = 2;
    int64_t intermediate_size = 768;
    double rope_theta = 10000.0;
    bool tie_word_embeddings = true;
    double init_std = 0.02;
    // data
    std::string tokenizer = "byte";  // "byte" or a model path whose tokenizer is used
    std::vector<std::string> sources = {"austen_*.txt", "mobydick.txt"};  // files in the prose cache
    std::string prose_dir;                                                // default: <repo>/.cache/prose
    std::string shard_dir;  // default: <repo>/.cache/shards/<tokenizer>
    std::string corpus;     // a `hydra corpus` directory: its shards replace data.sources / data.shard_dir
    std::string mix;  // with data.corpus: a mix file (JSON/TOML weights per source); "" = the corpus's mix
    double heldout_fraction = 0.02;
    int64_t seq_len = 256;
    int64_t batch_size = 8;
    uint64_t data_seed = 1234;
    // optimizer
    double lr = 2e-3;
    double min_lr_ratio = 0.1;
    int64_t warmup_steps = 20;
    std::string schedule = "cosine";  // constant | cosine | wsd
    // The LR schedule's horizon. Independent of run.steps (where one invocation stops), so a run cut
    // into pieces and resumed follows exactly the schedule of an uninterrupted run.
    int64_t schedule_steps = 1000;
    double decay_fraction = 0.2;  // wsd: fraction of steps spent decaying
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
    double grad_clip = 1.0;
    // stage (HydraHead transfer, methods.md §4): pretrain trains `model.*` from scratch; align,
    // distill and longctx start from stage.init (a converted hybrid or an earlier stage) and learn
    // from stage.teacher.
    std::string stage = "pretrain";      // pretrain | align | distill | longctx
    std::string init;                    // model directory the student starts from
    std::string teacher;                 // teacher model (align, distill; longctx when loss.kl_weight > 0)
    std::vector<std::string> trainable;  // globs of trainable parameters (empty: all)
    double mixer_lr_scale =
        1.0;                 // lr multiplier of attention-mixer parameters (self_attn, linear_attn, fusion)
    double ce_weight = 1.0;  // loss = ce_weight * CE + kl_weight * KL(teacher || student)
    double kl_weight = 0.0;
    double temperature = 1.0;
    int64_t kl_max_position =
        0;  // KL only at positions < this (0: everywhere; longctx: the teacher's window)
    int64_t ce_from_position =
        0;  // CE only at positions >= this (0: everywhere; longctx: the teacher's window, past which
            // only the text can teach, while inside it the teacher does)
    double synthetic_fraction = 0.0;  // share of rows drawn from synthetic retrieval tasks (longctx)
    std::vector<std::string> synthetic_tasks = {"passkey", "niah_single_1", "niah_multikey_1"};
    // run
    int64_t steps = 200;
    int64_t log_every = 10;
    int64_t eval_every = 100;
    int64_t eval_batches = 8;
    int64_t save_every = 50;
    uint64_t seed = 0;
    int64_t max_bad_steps = 5;   // consecutive non-finite steps before the run stops
    bool recompute = false;      // recompute attention probabilities in the backward
    std::string device = "cpu";  // cpu | cuda (the GPU step of src/gpu, -DHYDRA_CUDA=ON builds)
    int threads = 0;

    // Applies one key from a JSON value; throws naming `origin` and the key.
    void set(const std::string& key, const nlohmann::json& value, const std::string& origin);
    // Applies every key of a (possibly nested) JSON object.
    void apply(const nlohmann::json& object, const std::string& origin);
    // Applies "key=value" (value parsed as JSON when it parses, else as a string).
    void apply_override(const std::string& assignment);
    // Checks ranges and cross-field consistency.
    void validate() const;
    nlohmann::json to_json() const;
    // The llama-family ModelConfig these settings describe, for a tokenizer of `vocab_size` ids.
    ModelConfig model_config(int32_t vocab_size, int32_t eos_id) const;

    static TrainConfig preset(const std::string& name);  // "tiny-cpu", "test-micro"
    static std::vector<std::string> preset_names();
    static std::vector<std::string> keys();
};

// Loads a .json or .toml file into a nested JSON object (TOML through toml++).
nlohmann::json load_config_file(const std::string& path);

}  // namespace hydra
