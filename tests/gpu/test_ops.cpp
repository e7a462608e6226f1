// The GPU op table: every CUDA op forward and backward against its CPU float reference, one named test per
// case (GpuOps/Parity.<case>), odd shapes throughout (T not a multiple of the 64-row chunks or the
// attention tiles, 9 heads, rows not a multiple of 8, C > 1024, vocabularies of 1000 and 1001). The GDN
// chunk shapes also cover every state-scan variant the automatic policy (ops/cuda/gdn_scan_policy.h) picks
// on the GPU it runs on; GpuOpTable.GdnShapesReachEveryScanVariant checks that they do.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "device_io.h"
#include "model/hybrid_plan.h"
#include "op_case.h"
#include "ops/cuda/gdn_scan_policy.h"
#include "parity.h"

namespace hydra::gputest {

namespace {

// (pairs = B x HV; the comments give the variant an H200's 132 SMs get)
const std::vector<GdnChunkShape>& gdn_chunk_shapes() {
    static const std::vector<GdnChunkShape> shapes = {
        {2, 1000, 2, 4, 64},   // grouped value heads, partial last chunk (8 pairs: 16-row slices x 8 warps)
        {1, 4100, 2, 2, 128},  // long, partial last chunk (2 pairs: 16-row slices)
        {1, 37, 1, 1, 128},    // one partial chunk
        {3, 130, 3, 3, 64},
        {2, 300, 16, 16, 128},  // 32 pairs: 32-row slices x 8 warps, one wave
        {3, 333, 6, 12, 128},   // 36 pairs: 64-row slices x 8 warps
        {8, 200, 9, 9, 64},     // SmolLM2's 9 heads, 72 pairs: whole d 64 heads x 8 warps
        {7, 150, 5, 10, 128},   // 70 pairs: whole d 128 heads (128 rows x 16 warps)
        {3, 77, 15, 45,
         64},  // 135 pairs, more than the SMs: 32-row slices single-buffered, two blocks per SM
        {2, 130, 3, 27, 64},  // 54 pairs: 32-row slices x 8 warps at d 64
        // without the q/k L2 norm (one value head per key head, and grouped: the finishing pass)
        {2, 300, 4, 4, 128, false},
        {2, 1000, 2, 4, 64, false},
        // q, k like a hybrid's LA layer's (the training-step parity's q / k path is where the GPU departs
        // most)
        {2, 256, 3, 3, 64, true, true},
        {1, 300, 2, 2, 128, true, true},
    };
    return shapes;
}

std::vector<OpCase> op_cases() {
    using FK = FusionKind;
    std::vector<OpCase> c;
    // ---- sequence mixers ----
    for (const GdnChunkShape& s : gdn_chunk_shapes()) c.push_back(gdn_chunk_case(s));
    c.push_back(gdn_decode_case(3, 2, 4, 64));
    c.push_back(gdn_decode_case(5, 2, 2, 128));
    const int attn[][5] = {
        {2, 1000, 4, 2, 64},  // GQA, T not a multiple of the tiles
        {1, 4100, 2, 1, 128},
        {1, 77, 3, 3, 128},
        {2, 333, 9, 3, 64},  // SmolLM2's grouping (3 query heads per KV head)
    };
    for (const auto& a : attn) {
        c.push_back(attention_case(a[0], a[1], a[2], a[3], a[4]));
        c.push_back(attention_cudnn_case(a[0], a[1], a[2], a[3], a[4], false));
        c.push_back(attention_cudnn_case(a[0], a[1], a[2], a[3], a[4], true));
        c.push_back(attention_cudnn_case(a[0], a[1], a[2], a[3], a[4], false, true));
        c.push_back(attention_cudnn_case(a[0], a[1], a[2], a[3], a[4], true, true));
    }
    c.push_back(attention_window_case(2, 1000, 4, 2, 64, 100, 4));  // windows inside and across tiles
    c.push_back(attention_window_case(1, 700, 9, 3, 64, 64, 0));    // SmolLM2's grouping, no sinks
    c.push_back(attention_window_case(1, 333, 2, 1, 128, 7, 1));    // a window smaller than a mma tile row
    // ---- layer ops ----
    c.push_back(embedding_case(77, 1000, 576));
    c.push_back(rmsnorm_case(77, 576));
    c.push_back(rmsnorm_case(4099, 960));   // several rows per reduction part
    c.push_back(rmsnorm_case(20000, 576));  // 5 rows per part (vector path, 5 float4 groups per lane)
    c.push_back(rmsnorm_case(45, 64));      // vector path, half the lanes idle
    c.push_back(rmsnorm_case(130, 130));    // C % 4 != 0: scalar path
    c.push_back(rmsnorm_case(33, 1100));    // C > 1024: scalar path
    c.push_back(rope_case(2, 130, 9, 64, 64, 0));
    c.push_back(rope_case(3, 37, 5, 128, 64, 1000));  // partial rotary, offset positions
    c.push_back(rope_case(2, 33, 3, 64, 18, 5));      // odd half (9 pairs): one pair per thread
    c.push_back(rope_case(2, 41, 4, 64, 24, 3));  // 12 pairs: 4 per thread (8 per thread when half % 8 == 0)
    c.push_back(rope_case(1, 29, 3, 64, 20, 7));  // 10 pairs: 2 per thread
    c.push_back(rope_case(1, 5, 40, 64, 62, 0));  // 40 x 31 pairs per row > 1024 threads: the flat kernel
    // RoPE scaling: each type's frequencies, YaRN's scale on cos / sin, dynamic NTK past its context
    c.push_back(rope_scaled_case("linear:4", 4096, 2, 130, 9, 64, 0));
    c.push_back(rope_scaled_case("yarn:4,original_max_position_embeddings=256", 1024, 2, 130, 9, 64, 200));
    c.push_back(rope_scaled_case("yarn:8,beta_fast=16,attention_factor=1.3", 512, 1, 77, 5, 128, 1000));
    c.push_back(rope_scaled_case("llama3:8,original_max_position_embeddings=64", 512, 2, 130, 9, 64, 0));
    c.push_back(
        rope_scaled_case("llama3:8,original_max_position_embeddings=8192", 65536, 1, 33, 4, 128, 9000));
    c.push_back(rope_scaled_case("dynamic:4", 128, 2, 130, 9, 64, 100));  // L = 230 > 128: base grows
    c.push_back(rope_scaled_case("dynamic:2", 4096, 1, 37, 5, 128, 0));   // L < context: unscaled
    c.push_back(swiglu_case(77, 1536));                                   // 16-byte path
    c.push_back(swiglu_case(33, 100));  // element path (rows not a multiple of 8)
    c.push_back(short_conv_case(2, 130, 576, 4, false, 0));
    c.push_back(short_conv_case(3, 130, 320, 4, true, 96));
    c.push_back(short_conv_case(2, 2, 200, 4, true, 0));  // segment shorter than the window
    c.push_back(short_conv_case(4, 1, 256, 4, true, 0));  // decode step
    c.push_back(short_conv_case(1, 77, 128, 3, true, 0));
    c.push_back(short_conv_case(1, 20, 64, 1, false, 0));  // no window
    // a decode step's q, k and v convolutions in one launch: contiguous and slot-pool windows
    c.push_back(short_conv_decode_case(1, 512, 4, 0));
    c.push_back(short_conv_decode_case(3, 192, 4, 64));
    c.push_back(short_conv_decode_case(2, 130, 2, 0));
    c.push_back(short_conv_decode_case(2, 64, 1, 0));  // no window
    c.push_back(gdn_gates_case(260, 9, false));
    c.push_back(gdn_gates_case(77, 16, true));
    c.push_back(gated_rmsnorm_case(130, 9, 64, 0));
    c.push_back(gated_rmsnorm_case(77, 6, 128, 200));
    c.push_back(gated_rmsnorm_case(3000, 4, 64, 0));  // several rows per reduction part
    for (FK k : {FK::ScaleNorm, FK::None, FK::Hymba, FK::LaOnly})
        c.push_back(fusion_case(k, 77, 3, 6, 64, false));
    c.push_back(fusion_case(FK::ScaleNorm, 77, 3, 6, 64, true));
    c.push_back(fusion_case(FK::Hymba, 130, 0, 9, 64, true));     // pure LA layer
    c.push_back(fusion_case(FK::LaOnly, 77, 9, 0, 64, false));    // pure FA layer: copy
    c.push_back(fusion_case(FK::Hymba, 2500, 2, 7, 128, false));  // 896-wide segment: element path
    c.push_back(fusion_case(FK::Hymba, 300, 2, 6, 64, false));    // pair path, 8 pairs per lane
    c.push_back(
        fusion_case(FK::ScaleNorm, 5000, 1, 8, 128, false));  // pair path, 2 pairs, several rows per part
    c.push_back(fusion_case(FK::LaOnly, 77, 2, 5, 64, true));
    // the LA offsets (la_bias plans), out of place (training) and in place (inference), every kind with them
    for (FK k : {FK::ScaleNorm, FK::Hymba, FK::LaOnly})
        c.push_back(fusion_case(k, 77, 3, 6, 64, false, true));
    c.push_back(
        fusion_case(FK::ScaleNorm, 3000, 1, 8, 64, true, true));  // several row blocks of the bias sums
    c.push_back(elementwise_case(77, 576));
    // ---- training ops ----
    c.push_back(gemm_case(77, 129, 200));
    // single rows (decode): x @ W^T goes to row_gemv (one to eight chunks a lane, a partial last warp, an
    // odd row count), the other transposes and K past kRowGemvMaxK to cuBLAS
    c.push_back(gemm_case(1, 960, 576));
    c.push_back(gemm_case(1, 577, 1536));
    c.push_back(gemm_case(1, 13, 2048));
    c.push_back(gemm_case(1, 5, 8));
    c.push_back(gemm_case(1, 33, 2056));
    // decode buckets of 2 and 4 rows: row_gemv too, each row bit-equal to its product alone; 8 rows: cuBLAS
    c.push_back(gemm_case(2, 960, 576));
    c.push_back(gemm_case(4, 577, 1536));
    c.push_back(gemm_case(8, 1000, 576));
    c.push_back(linear_case(301, 576, 1536));
    c.push_back(linear_case(33, 1000, 77));
    // small vocabulary: one partial chunk, several row blocks
    c.push_back(cross_entropy_case(301, 576, 1000, 128, 4096));
    // the real vocabulary: 12 chunks of 4096 (and 6 of 8192 + one row block with the defaults)
    c.push_back(cross_entropy_case(301, 576, 49152, 128, 4096));
    c.push_back(cross_entropy_case(301, 576, 49152, 2048, 8192));
    // one chunk holding the whole vocabulary: pass 2 reuses pass 1's logits (the training step's choice);
    // the fused CE row kernel, 16-byte path (V % 4 == 0, also V = 1000 above) and scalar path (V = 1001)
    c.push_back(cross_entropy_case(301, 576, 49152, 128, 49152));
    c.push_back(cross_entropy_case(301, 576, 1001, 128, 4096));
    c.push_back(kl_case(301, 576, 576, 1000, 1.0f, 100, 0, 128, 384));
    c.push_back(kl_case(301, 576, 640, 49152, 2.0f, 100, 60, 128, 8192));
    c.push_back(kl_case(301, 576, 640, 49152, 2.0f, 100, 60, 128, 49152));  // resident
    // V % 4 != 0 (scalar paths): resident, and chunks of 250 (rows not 16-byte aligned, last chunk 1)
    c.push_back(kl_case(301, 576, 576, 1001, 1.0f, 100, 60, 128, 1001));
    c.push_back(kl_case(301, 576, 576, 1001, 2.0f, 100, 60, 128, 250));
    c.push_back(mse_case(301 * 576));
    c.push_back(adamw_case());
    return c;
}

class GpuOps : public ::testing::TestWithParam<OpCase> {};

TEST_P(GpuOps, Parity) {
    const OpCase& c = GetParam();
    Rng rng = case_rng(c.name);
    c.run(rng);
}

INSTANTIATE_TEST_SUITE_P(Table, GpuOps, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

// The automatic scan choice on this GPU, over every pair count up to 4096 at d 64 and 128, against the
// choices the table's GDN chunk shapes get: each variant the policy can pick must run in some case.
TEST(GpuOpTable, GdnShapesReachEveryScanVariant) {
    const int sms = device_sms();
    for (int D : {64, 128}) {
        std::set<int> possible, covered;
        for (size_t pairs = 1; pairs <= 4096; ++pairs)
            possible.insert(cuda::gdn_scan_variant_for(D, pairs, sms));
        for (const GdnChunkShape& s : gdn_chunk_shapes())
            if (s.D == D) covered.insert(cuda::gdn_scan_variant_for(D, size_t(s.B) * s.HV, sms));
        for (int v : possible)
            EXPECT_TRUE(covered.count(v))
                << "no GDN chunk case runs scan variant " << v << " at d " << D << " on " << sms
                << " SMs: add a shape with that many (sequence, value head) pairs";
    }
}

}  // namespace

}  // namespace hydra::gputest
