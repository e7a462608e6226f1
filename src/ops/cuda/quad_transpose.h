// Which word a lane exchanges in each step of a 4 x 4 transpose within a quad of lanes (four lanes
// lane & ~3 .. +3), the index logic of tile_store.cuh's quad_transpose. Pure host/device logic without
// CUDA, so the CPU tests check that the two exchange steps transpose.
#pragma once

namespace hydra::cuda {

// Lane q of a quad holds x[0..3] = M(q, 0..3); after the transpose it holds M(0..3, q). Two steps, each two
// exchanges with shuffles: step 0 with lane ^ 2 swaps the off-diagonal 2 x 2 blocks, step 1 with lane ^ 1
// the off-diagonal entries within each 2 x 2 block. In exchange t (0, 1) of a step, lane `lane` sends its
// word k = quad_transpose_word(lane, step, t) and puts the word it receives in the same place x[k].
#if defined(__CUDACC__)
__host__ __device__
#endif
    constexpr int
    quad_transpose_word(int lane, int step, int t) {
    if (step == 0) return (lane & 2) ? t : 2 + t;  // the block of columns the partner's rows need
    return (lane & 1) ? 2 * t : 2 * t + 1;         // within block t, the column the partner's row needs
}

// The lane a step exchanges with.
constexpr int quad_transpose_mask(int step) {
    return step == 0 ? 2 : 1;
}

}  // namespace hydra::cuda
