// A batch's token positions grouped by token id, for a deterministic embedding backward on the GPU
// (ops/cuda/embedding.h embedding_backward_grouped): one group per distinct id, its positions in order, so
// that one thread block sums a table row's gradient in a fixed order instead of atomics racing on it.
//
// Packed layout (int32, a fixed 3 N + 2 entries whatever the batch, so that a device buffer and a captured
// CUDA graph keep their size and address from step to step):
//   [0]                       G, the number of groups (distinct ids in [0, V))
//   [1, N + 2)                start: group g's positions are order[start[g] .. start[g + 1]); start[G] = the
//                             positions kept; entries past G repeat it
//   [N + 2, 2 N + 2)          id of group g (groups by increasing id); entries past G are -1
//   [2 N + 2, 3 N + 2)        order: the positions, group by group, increasing within a group; ids outside
//                             [0, V) are left out (the forward writes NaN there; the backward skips them)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hydra {

// Fills `packed` (resized to 3 N + 2) from ids (N) with a counting sort over [0, V); `counts` is scratch
// kept by the caller between calls (resized to V + 1).
void group_tokens(std::span<const int32_t> ids, int64_t V, std::vector<int32_t>& packed,
                  std::vector<int32_t>& counts);

inline int64_t token_groups_size(int64_t N) {
    return 3 * N + 2;
}

}  // namespace hydra
