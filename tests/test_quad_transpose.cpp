// The exchange rule of tile_store.cuh's quad transpose (src/ops/cuda/quad_transpose.h), run on the CPU for
// the 32 lanes of a warp: two steps of two exchanges, each lane sending quad_transpose_word's word to lane ^
// mask and storing what it receives in the same place, must leave lane q of each quad with column q of its
// quad's 4 x 4 matrix. No GPU needed.
#include <gtest/gtest.h>

#include <array>

#include "ops/cuda/quad_transpose.h"

using namespace hydra::cuda;

namespace {

using Warp = std::array<std::array<int, 4>, 32>;

// One shuffle-exchange step as the warp runs it: all lanes send, then all receive.
void run_steps(Warp& x, int (*word)(int, int, int)) {
    for (int step = 0; step < 2; ++step)
        for (int t = 0; t < 2; ++t) {
            std::array<int, 32> sent{};
            for (int lane = 0; lane < 32; ++lane) sent[lane] = x[lane][word(lane, step, t)];
            for (int lane = 0; lane < 32; ++lane)
                x[lane][word(lane, step, t)] = sent[lane ^ quad_transpose_mask(step)];
        }
}

Warp numbered() {  // lane l, word j: 100 l + j (the quad's row l % 4, column j)
    Warp x{};
    for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 4; ++j) x[lane][j] = 100 * lane + j;
    return x;
}

int rule(int lane, int step, int t) {
    return quad_transpose_word(lane, step, t);
}

}  // namespace

TEST(QuadTranspose, EachLaneEndsWithItsColumn) {
    Warp x = numbered();
    run_steps(x, rule);
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i)  // word i of lane q: row i's column q, from the same quad
            EXPECT_EQ(x[lane][i], 100 * ((lane & ~3) + i) + (lane & 3)) << "lane " << lane << " word " << i;
}

TEST(QuadTranspose, TheTwoExchangesOfAStepTouchDifferentWords) {
    for (int lane = 0; lane < 32; ++lane)
        for (int step = 0; step < 2; ++step) {
            EXPECT_NE(quad_transpose_word(lane, step, 0), quad_transpose_word(lane, step, 1));
            // partners agree on which words are off-diagonal: what one sends is what the other overwrites
            const int partner = lane ^ quad_transpose_mask(step);
            for (int t = 0; t < 2; ++t) {
                const int k = quad_transpose_word(lane, step, t), kp = quad_transpose_word(partner, step, t);
                EXPECT_EQ(k ^ quad_transpose_mask(step), kp) << "lane " << lane << " step " << step;
            }
        }
}

TEST(QuadTranspose, TheCheckRejectsAWrongRule) {
    Warp x = numbered();
    run_steps(
        x, [](int lane, int step, int t) { return step == 0 ? 2 * t : quad_transpose_word(lane, step, t); });
    bool all = true;
    for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) all = all && x[lane][i] == 100 * ((lane & ~3) + i) + (lane & 3);
    EXPECT_FALSE(all);
}
