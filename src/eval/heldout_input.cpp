// Held-out windows from a text file or token shards (see heldout_input.h).
#include "eval/heldout_input.h"

#include <span>

#include "core/error.h"
#include "eval/heldout_metrics.h"
#include "io/atomic_dir.h"
#include "train/token_shards.h"

namespace hydra {

HeldoutInput heldout_input_windows(const std::string& text_file, const std::string& shard_dir,
                                   const TextEncoder& encoder, int64_t window, int64_t max_tokens) {
    HYDRA_CHECK(text_file.empty() != shard_dir.empty(),
                "held-out text: give either a text file or a shards directory (got {})",
                text_file.empty() ? "neither" : "both");
    HeldoutInput in;
    if (!shard_dir.empty()) {
        const TokenShards shards = open_token_shards(shard_dir, &encoder);
        HYDRA_CHECK(
            shards.heldout.size() >= 2,
            "{}: the held-out split holds {} tokens; build the shards with a held-out fraction above 0",
            shard_dir, shards.heldout.size());
        in.source = shards.dir + " (held-out split)";
        in.windows = heldout_windows(shards.heldout, window, max_tokens);
        return in;
    }
    const std::string text = read_text_file(text_file, "the held-out text");
    HYDRA_CHECK(!text.empty(), "{}: the text file is empty", text_file);
    const std::vector<int32_t> ids = encoder.encode(text);
    HYDRA_CHECK(ids.size() >= 2, "{}: {} token(s); the agreement needs at least 2", text_file, ids.size());
    in.source = text_file;
    in.windows = heldout_windows(std::span<const int32_t>(ids), window, max_tokens);
    return in;
}

}  // namespace hydra
