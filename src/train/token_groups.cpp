// group_tokens: a stable counting sort of the positions by id (see token_groups.h).
#include "train/token_groups.h"

#include <algorithm>

#include "core/error.h"

namespace hydra {

void group_tokens(std::span<const int32_t> ids, int64_t V, std::vector<int32_t>& packed,
                  std::vector<int32_t>& counts) {
    const int64_t N = int64_t(ids.size());
    HYDRA_CHECK(N < (int64_t(1) << 30) && V > 0 && V < (int64_t(1) << 31),
                "group_tokens: {} tokens over a vocabulary of {}", N, V);
    packed.assign(size_t(token_groups_size(N)), 0);
    int32_t* start = packed.data() + 1;
    int32_t* group_id = start + (N + 1);
    int32_t* order = group_id + N;
    counts.assign(size_t(V) + 1, 0);
    for (const int32_t id : ids)
        if (id >= 0 && id < V) ++counts[size_t(id) + 1];
    // counts[id] becomes the first slot of id in `order`, and the groups are numbered by increasing id
    int32_t groups = 0, kept = 0;
    for (int64_t id = 0; id < V; ++id) {
        const int32_t n = counts[size_t(id) + 1];
        counts[size_t(id)] = kept;
        if (n > 0) {
            start[groups] = kept;
            group_id[groups] = int32_t(id);
            ++groups;
        }
        kept += n;
    }
    for (int64_t t = 0; t < N; ++t) {  // positions in increasing order: each group stays sorted
        const int32_t id = ids[size_t(t)];
        if (id >= 0 && id < V) order[counts[size_t(id)]++] = int32_t(t);
    }
    packed[0] = groups;
    std::fill(start + groups, start + N + 1, kept);
    std::fill(group_id + groups, group_id + N, -1);
    std::fill(order + kept, order + N, -1);
}

}  // namespace hydra
