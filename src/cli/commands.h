// The `hydra` subcommands: each register_* adds one subcommand with its options and its action.
#pragma once

#include <CLI/CLI.hpp>

#include "io/dir_lock.h"
#include "model/llama_model.h"
#include "train/data_loader.h"
#include "train/train_config.h"

#include <filesystem>
#include <string>

namespace hydra::cli {

void register_info(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_generate(CLI::App& app);
void register_ppl(CLI::App& app);
void register_train(CLI::App& app);
void register_convert(CLI::App& app);
void register_distill(CLI::App& app);
void register_pipeline(CLI::App& app);
void register_demo(CLI::App& app);
void register_init(CLI::App& app);

// A run directory of `hydra pipeline` / `hydra demo`, locked for the whole run: absent, empty, or an
// earlier run's (its `marker` file, e.g. pipeline_config.json, says so; its steps resume). Anything
// else is refused unless `force`, which deletes it. `out` is normalised (normalize_dir_path).
DirLock claim_run_dir(const std::filesystem::path& out, const std::string& marker, bool force);

// The synthetic-task row generator a TrainConfig asks for (data.synthetic_fraction > 0), else empty.
DataLoader::Generator synthetic_rows_for(const TrainConfig& config);
void register_score_heads(CLI::App& app);
void register_eval(CLI::App& app);
void register_report(CLI::App& app);
void register_analyze(CLI::App& app);
void register_corpus(CLI::App& app);
void register_serve(CLI::App& app);

// The MODEL argument's default: $HYDRA_MODEL, else the default model fetched by tools/setup.sh.
std::string default_model_path();
// Adds the common --threads option; call apply_threads() at the start of the action.
void add_threads_option(CLI::App& cmd, int& threads);
void apply_threads(int threads);
// Adds --quantize-weights {none,q8_0}: CPU decoding from Q8_0 copies of the f32 linear weights (a model
// directory; a quantized GGUF's own copies are used anyway). apply_weight_quantization() attaches them after
// the load and reports how many on stderr; the GPU path ignores them.
void add_weight_quantization_option(CLI::App& cmd, std::string& mode);
void apply_weight_quantization(LlamaModel& model, const std::string& mode);
// An integer option's check with a readable message ("must be an integer >= 1, got 0"), instead of
// CLI11's numeric ranges whose unbounded side prints as a 300-digit number.
CLI::Validator at_least(int64_t min);

}  // namespace hydra::cli
