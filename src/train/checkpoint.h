// Training checkpoints (DESIGN.md §5): a directory with
//   model.safetensors  weights under HF names (f32), loadable by hydra and by transformers
//   config.json        HF config + a "hydra" object (train config, tokenizer reference)
//   optim.safetensors  AdamW m and v ("optim.m.<name>", "optim.v.<name>")
//   state.json         step, AdamW step, RNG state, data cursor, consecutive bad steps
// written into "<dir>.tmp-<pid>" and swapped in by renames, so a crash or a failed write (disk
// full, unwritable folder) never leaves a half checkpoint and never loses the previous one.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"
#include "train/adamw.h"

namespace hydra {

struct TrainState {
    int64_t step = 0;                  // optimizer steps completed
    std::array<uint64_t, 4> rng{};     // trainer RNG state
    nlohmann::json data_cursor;        // DataLoader cursor (opaque here)
    int64_t bad_steps_in_row = 0;
    double last_loss = 0;
};

// Writes the checkpoint atomically; throws hydra::Error naming the directory on failure, in which
// case any previous checkpoint at `dir` is left as it was.
// `extra_files` (name -> content, e.g. the run's log.jsonl) are written into the same directory.
void save_checkpoint(const std::string& dir, const LlamaModel& model, const AdamW& optimizer,
                     const TrainState& state, const nlohmann::json& hydra_section,
                     const std::map<std::string, std::string>& extra_files = {});

struct LoadedCheckpoint {
    nlohmann::json hydra_section;  // config.json["hydra"]
    TrainState state;
};

// Restores weights into `model` (whose config must match) and the optimizer state; returns the
// rest. Throws naming the file and field for anything missing or inconsistent.
LoadedCheckpoint load_checkpoint(const std::string& dir, LlamaModel& model, AdamW& optimizer);

// Reads only config.json (to rebuild the model before load_checkpoint).
nlohmann::json read_checkpoint_config(const std::string& dir);

}  // namespace hydra
