// The held-out text a user points `hydra ppl --teacher` at, as the windows of eval/heldout_metrics.h:
// a UTF-8 text file tokenized by the model's encoder, or the held-out split of token shards (a
// `hydra corpus` directory or train/token_shards.h output) built by the same encoder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/byte_tokenizer.h"

namespace hydra {

struct HeldoutInput {
    std::vector<std::vector<int32_t>> windows;  // window + 1 tokens each (heldout_windows)
    std::string source;                         // what they came from, for reports
};

// Exactly one of text_file and shard_dir is non-empty. Windows of `window` predicted tokens until
// max_tokens are covered (fewer when the text is shorter). Throws hydra::Error naming the file or
// directory: unreadable or empty text, fewer than 2 tokens, shards of another tokenizer, an empty
// held-out split.
HeldoutInput heldout_input_windows(const std::string& text_file, const std::string& shard_dir,
                                   const TextEncoder& encoder, int64_t window, int64_t max_tokens);

}  // namespace hydra
