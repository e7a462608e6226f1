// The kernels of the GPU serving backend's batched decode, each against the one-sequence kernel it
// generalises, on random inputs: the same math in the same order, so the outputs must be equal BIT FOR
// BIT (parity.h's exact checks), which tells a wrong index apart from rounding at once:
//   - paged decode attention (gpu/paged_decode_attention.h) over shuffled blocks, rows of lengths 1, 130,
//     700 and 9000 in slots out of order, a strided q, spare splits in the grid, an uneven KV-group map,
//     head dim 64 and 128: against gpu/decode_attention.h on each row's contiguous cache;
//   - decode attention over long caches (up to the most splits a head takes, splits whose keys a sliding
//     window hides entirely) against the CPU's causal attention of the last query: the merge of the splits;
//   - the paged K/V writes (gpu/paged_kv_write.h): a batch's rows into their blocks, a prefix's rows from
//     row0 on, and back to rows: the values come back unchanged;
//   - the GDN decode step with states in slots (gdn_decode_step_slots) against gdn_decode_step on the
//     same states laid out per sequence (outputs and updated states);
//   - the GDN decode step computing its gates in place (gdn_decode_step_gated) against the gates kernel
//     followed by gdn_decode_step, contiguous and in slots, beta up to 1 and up to 2;
//   - the short conv with windows in slots (short_conv_forward_slots) against short_conv_forward;
//   - RoPE at per-row positions (rope_forward_rows) against rope_forward_decode at each position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "device_io.h"
#include "gpu/decode_attention.h"
#include "gpu/paged_decode_attention.h"
#include "gpu/paged_kv_write.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gdn_gates.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/short_conv.h"
#include "parity.h"

namespace hydra::gputest {

namespace {

// A shuffled assignment of blocks to the rows: table (slots, max_blocks), row b in slot slots[b].
struct Paging {
    int64_t bs = 16, max_blocks = 0, n_blocks = 0;
    std::vector<int32_t> table;
};
Paging make_paging(const std::vector<int64_t>& lens, const std::vector<int32_t>& slots, Rng& rng) {
    Paging p;
    for (int64_t L : lens) p.max_blocks = std::max(p.max_blocks, (L + p.bs - 1) / p.bs);
    int64_t need = 0;
    for (int64_t L : lens) need += (L + p.bs - 1) / p.bs;
    p.n_blocks = need + 5;
    std::vector<int32_t> ids(static_cast<size_t>(p.n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    for (size_t i = ids.size() - 1; i > 0; --i)
        std::swap(ids[i], ids[size_t(uniform_below(rng, int64_t(i) + 1))]);
    const int64_t n_slots = *std::max_element(slots.begin(), slots.end()) + 1;
    p.table.assign(size_t(n_slots * p.max_blocks), 0);
    size_t next = 0;
    for (size_t b = 0; b < lens.size(); ++b)
        for (int64_t j = 0; j < (lens[b] + p.bs - 1) / p.bs; ++j)
            p.table[size_t(slots[b] * p.max_blocks + j)] = ids[next++];
    return p;
}

void paged_attention_case(int64_t D) {
    Rng rng = case_rng("PagedDecodeAttention" + std::to_string(D));
    const int64_t n_q = 9, n_kv = 3, B = 3, W = n_kv * D, ldq = n_q * D + 64, ldo = n_q * D;
    const std::vector<int64_t> lens = {1, 130, 700,
                                       9000};  // 9000: 141 splits, more than a merge thread's one
    const std::vector<int32_t> slots = {2, 0, 3, 1}, kv_index = {0, 0, 1, 2, 1, 1, 2, 0, 2};
    const Paging pg = make_paging(lens, slots, rng);
    const float scale = float(1.0 / std::sqrt(double(D)));
    std::vector<float> kpool(size_t(pg.n_blocks * pg.bs * W), 0.f), vpool(kpool.size(), 0.f);
    const std::vector<float> q = bf16_values(size_t(B * ldq), rng);
    Dev<int32_t> kvi = dev_i32(kv_index);
    std::vector<float> want;
    for (int64_t b = 0; b < B; ++b) {  // the reference on each row's contiguous cache
        const int64_t L = lens[size_t(b)];
        const std::vector<float> k = bf16_values(size_t(L * W), rng), v = bf16_values(size_t(L * W), rng);
        for (int64_t j = 0; j < L; ++j) {
            const int64_t blk = pg.table[size_t(slots[size_t(b)] * pg.max_blocks + j / pg.bs)];
            std::copy_n(k.begin() + j * W, W, kpool.begin() + (blk * pg.bs + j % pg.bs) * W);
            std::copy_n(v.begin() + j * W, W, vpool.begin() + (blk * pg.bs + j % pg.bs) * W);
        }
        Dev<bf16> dk = dev_bf16(k), dv = dev_bf16(v);
        Dev<bf16> dq = dev_bf16(std::vector<float>(q.begin() + b * ldq, q.begin() + b * ldq + n_q * D));
        Dev<bf16> o(n_q * D);
        Dev<float> part(static_cast<int64_t>(gpu::decode_attention_workspace_floats(n_q, D, L)));
        gpu::decode_attention_workspace_clear(part.p());
        gpu::decode_attention(o.p(), dq.p(), dk.p(), dv.p(), kvi.p(), n_q, n_kv, D, L, scale, part.p());
        const std::vector<float> ob = host(o);
        want.insert(want.end(), ob.begin(), ob.end());
    }
    Dev<bf16> dkp = dev_bf16(kpool), dvp = dev_bf16(vpool), dq = dev_bf16(q), o(B * ldo);
    std::vector<int32_t> pos;
    for (int64_t L : lens) pos.push_back(int32_t(L - 1));
    Dev<int32_t> dpos = dev_i32(pos), dslots = dev_i32(slots), dtable = dev_i32(pg.table);
    const int64_t max_splits = gpu::decode_attention_splits(9000) + 2;  // two spare splits per row
    Dev<float> part(
        static_cast<int64_t>(gpu::paged_decode_attention_workspace_floats(B, n_q, D, max_splits)));
    gpu::decode_attention_workspace_clear(part.p());
    gpu::PagedKv kv;
    kv.k_pool = dkp.p(), kv.v_pool = dvp.p(), kv.block_table = dtable.p(), kv.max_blocks = pg.max_blocks;
    kv.block_size = pg.bs;
    gpu::paged_decode_attention(o.p(), ldo, dq.p(), ldq, kv, kvi.p(), n_q, n_kv, D, B, dpos.p(), dslots.p(),
                                max_splits, scale, part.p());
    expect_exact("paged decode attention D=" + std::to_string(D) + " against decode_attention per row",
                 bit_mismatches(host(o), want));
}

// One query per head at position L - 1 over L cached keys, against the CPU's causal attention of that query
// (fp32 on the same bf16 values): L up to where a head has kMaxDecodeSplits splits of more than
// kMinKeysPerSplit keys; with `window` > 0 every head sees the last `window` keys and 4 sinks, so most splits
// are masked whole.
void long_decode_case(int64_t D, int64_t L, int32_t window) {
    Rng rng = case_rng("LongDecodeAttention" + std::to_string(D) + "_" + std::to_string(L));
    const int64_t n_q = 9, n_kv = 3, sinks = window > 0 ? 4 : 0;
    const float scale = float(1.0 / std::sqrt(double(D)));
    const std::vector<float> q = bf16_values(size_t(n_q * D), rng);
    const std::vector<float> k = bf16_values(size_t(L * n_kv * D), rng, 2.f);  // peaked softmax rows
    const std::vector<float> v = bf16_values(size_t(L * n_kv * D), rng);
    const std::vector<int32_t> kv_index = {0, 0, 0, 1, 1, 1, 2, 2, 2};
    const std::vector<int32_t> windows(size_t(n_q), window);
    std::vector<float> ref(size_t(n_q * D));
    cpu::causal_attention_forward<float>(ref.data(), nullptr, q.data(), k.data(), v.data(), 1, L - 1, n_q,
                                         n_kv, D, scale, kv_index.data(),
                                         window > 0 ? windows.data() : nullptr, sinks);
    Dev<bf16> dq = dev_bf16(q), dk = dev_bf16(k), dv = dev_bf16(v), o(n_q * D);
    Dev<int32_t> kvi = dev_i32(kv_index), dwin = dev_i32(windows);
    Dev<float> part(static_cast<int64_t>(gpu::decode_attention_workspace_floats(n_q, D, L)));
    gpu::decode_attention_workspace_clear(part.p());
    const gpu::DecodeWindows dw{window > 0 ? dwin.p() : nullptr, sinks};
    gpu::decode_attention(o.p(), dq.p(), dk.p(), dv.p(), kvi.p(), n_q, n_kv, D, L, scale, part.p(), nullptr,
                          dw);
    const std::string what = "decode attention D=" + std::to_string(D) + " L=" + std::to_string(L) + " (" +
                             std::to_string(gpu::decode_attention_splits(L)) + " splits)" +
                             (window > 0 ? " window " + std::to_string(window) : std::string());
    expect_rel(what, host(o), ref, kTolBf16);
    const std::vector<float> first = host(o);
    o.poison();  // again: the counters were left clear, and the same splits merge to the same bits
    gpu::decode_attention(o.p(), dq.p(), dk.p(), dv.p(), kvi.p(), n_q, n_kv, D, L, scale, part.p(), nullptr,
                          dw);
    expect_exact(what + " repeated", bit_mismatches(host(o), first));
}

}  // namespace

TEST(GpuBatchDecodeOps, DecodeAttentionLongCachesMatchCpu) {
    for (const int64_t D : {64, 128})
        for (const int64_t L : {4096, 8193, 20000}) long_decode_case(D, L, 0);
    long_decode_case(64, 20000, 100);
    long_decode_case(128, 9000, 300);
}

TEST(GpuBatchDecodeOps, PagedAttentionMatchesDecodeAttention) {
    paged_attention_case(64);
    paged_attention_case(128);
}

TEST(GpuBatchDecodeOps, PagedKvWritesRoundTrip) {
    Rng rng = case_rng("PagedKvWrites");
    const int64_t W = 3 * 64, B = 3, ld = W + 128;
    const std::vector<int64_t> lens = {40, 1, 77};
    const std::vector<int32_t> slots = {1, 2, 0};
    const Paging pg = make_paging(lens, slots, rng);
    Dev<int32_t> dtable = dev_i32(pg.table), dslots = dev_i32(slots);
    Dev<bf16> kp(pg.n_blocks * pg.bs * W), vp(pg.n_blocks * pg.bs * W);
    // each row's whole sequence from row 0 in two pieces ([0, 16) then [16, L)), back to rows
    for (int64_t b = 0; b < B; ++b) {
        const int64_t L = lens[size_t(b)], split = std::min<int64_t>(16, L);
        const std::vector<float> k = bf16_values(size_t(L * W), rng), v = bf16_values(size_t(L * W), rng);
        Dev<bf16> dk = dev_bf16(k), dv = dev_bf16(v), bk(L * W), bv(L * W);
        const int32_t* row = dtable.p() + slots[size_t(b)] * pg.max_blocks;
        gpu::copy_rows_to_blocks(kp.p(), vp.p(), dk.p(), dv.p(), 0, split, W, row, pg.bs, nullptr);
        gpu::copy_rows_to_blocks(kp.p(), vp.p(), dk.p(), dv.p(), split, L - split, W, row, pg.bs, nullptr);
        gpu::copy_blocks_to_rows(bk.p(), bv.p(), kp.p(), vp.p(), L, W, row, pg.bs, nullptr);
        expect_exact("rows -> blocks -> rows, K, row " + std::to_string(b), bit_mismatches(host(bk), k));
        expect_exact("rows -> blocks -> rows, V, row " + std::to_string(b), bit_mismatches(host(bv), v));
    }
    // a decode step's rows (strided like the fused projection row) at each row's last position
    const std::vector<float> k = bf16_values(size_t(B * ld), rng), v = bf16_values(size_t(B * ld), rng);
    std::vector<int32_t> pos;
    for (int64_t L : lens) pos.push_back(int32_t(L - 1));
    Dev<bf16> dk = dev_bf16(k), dv = dev_bf16(v);
    Dev<int32_t> dpos = dev_i32(pos);
    gpu::write_kv_paged(kp.p(), vp.p(), dk.p(), dv.p(), ld, W, B, dpos.p(), dslots.p(), dtable.p(),
                        pg.max_blocks, pg.bs, nullptr);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t L = lens[size_t(b)];
        Dev<bf16> bk(L * W), bv(L * W);
        gpu::copy_blocks_to_rows(bk.p(), bv.p(), kp.p(), vp.p(), L, W,
                                 dtable.p() + slots[size_t(b)] * pg.max_blocks, pg.bs, nullptr);
        const std::vector<float> gk = host(bk), gv = host(bv);
        expect_exact("write_kv_paged K row " + std::to_string(b),
                     bit_mismatches(std::vector<float>(gk.end() - W, gk.end()),
                                    std::vector<float>(k.begin() + b * ld, k.begin() + b * ld + W)));
        expect_exact("write_kv_paged V row " + std::to_string(b),
                     bit_mismatches(std::vector<float>(gv.end() - W, gv.end()),
                                    std::vector<float>(v.begin() + b * ld, v.begin() + b * ld + W)));
    }
}

TEST(GpuBatchDecodeOps, GdnDecodeWithSlotsMatchesPerSequence) {
    for (int D : {64, 128}) {
        Rng rng = case_rng("GdnDecodeSlots" + std::to_string(D));
        const int B = 3, H = 4;
        const int64_t S = int64_t(H) * D * D, stride = S + 128, n_slots = 5;
        const std::vector<int32_t> slots = {3, 0, 4};
        const std::vector<float> q = bf16_values(size_t(B * H * D), rng),
                                 k = bf16_values(size_t(B * H * D), rng),
                                 v = bf16_values(size_t(B * H * D), rng);
        std::vector<float> g(size_t(B * H)), beta(size_t(B * H));
        for (float& x : g) x = -0.5f * float(rng.uniform());
        for (float& x : beta) x = float(rng.uniform());
        std::vector<float> pool = f32_values(size_t(n_slots * stride), rng, 0.1f), states;
        for (int b = 0; b < B; ++b)
            states.insert(states.end(), pool.begin() + slots[size_t(b)] * stride,
                          pool.begin() + slots[size_t(b)] * stride + S);
        Dev<bf16> dq = dev_bf16(q), dk = dev_bf16(k), dv = dev_bf16(v), o1(B * H * D), o2(B * H * D);
        Dev<float> dg = dev_f32(g), db = dev_f32(beta), ds = dev_f32(states), dp = dev_f32(pool);
        Dev<int32_t> dslots = dev_i32(slots);
        const float scale = float(1.0 / std::sqrt(double(D)));
        cuda::gdn_decode_step(B, H, H, D, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), ds.p(), ds.p(), o1.p(),
                              scale, true);
        cuda::gdn_decode_step_slots(B, H, H, D, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), dp.p(), dslots.p(),
                                    stride, o2.p(), scale, true);
        expect_exact("GDN decode output, slots against per sequence, D=" + std::to_string(D),
                     bit_mismatches(host(o2), host(o1)));
        const std::vector<float> ref = host(ds), got = host(dp);
        std::vector<float> gs;
        for (int b = 0; b < B; ++b)
            gs.insert(gs.end(), got.begin() + slots[size_t(b)] * stride,
                      got.begin() + slots[size_t(b)] * stride + S);
        expect_exact("GDN decode updated states, D=" + std::to_string(D), bit_mismatches(gs, ref));
        // slot 1 and 2 (no row) untouched
        expect_exact("GDN decode leaves other slots alone",
                     bit_mismatches(std::vector<float>(got.begin() + stride, got.begin() + 3 * stride),
                                    std::vector<float>(pool.begin() + stride, pool.begin() + 3 * stride)));
    }
}

// The decode step computing its gates in place (gdn_decode_step_gated) against gdn_gates_forward followed by
// gdn_decode_step: the same outputs and states, bit for bit, with contiguous states and in a slot pool, and
// with beta = 2 sigmoid(b) (negative eigenvalues allowed).
TEST(GpuBatchDecodeOps, GdnDecodeWithGatesInPlaceMatchesGatesKernel) {
    for (int D : {64, 128}) {
        for (bool neg : {false, true}) {
            Rng rng = case_rng("GdnDecodeGated" + std::to_string(D) + (neg ? "neg" : ""));
            const int B = 3, H = 4;
            const int64_t S = int64_t(H) * D * D, stride = S + 64, n_slots = 4, ab = 2 * H + 6;
            const std::vector<int32_t> slots = {2, 0, 3};
            const std::vector<float> q = bf16_values(size_t(B * H * D), rng),
                                     k = bf16_values(size_t(B * H * D), rng),
                                     v = bf16_values(size_t(B * H * D), rng),
                                     lab = bf16_values(size_t(B * ab), rng);
            std::vector<float> A_log(static_cast<size_t>(H)), dt_bias(static_cast<size_t>(H));
            for (float& x : A_log) x = float(rng.uniform()) - 0.5f;
            for (float& x : dt_bias) x = float(rng.uniform()) - 0.5f;
            std::vector<float> states = f32_values(size_t(B * S), rng, 0.1f),
                               pool(size_t(n_slots * stride), 0.f);
            for (int b = 0; b < B; ++b)
                std::copy(states.begin() + b * S, states.begin() + (b + 1) * S,
                          pool.begin() + slots[size_t(b)] * stride);
            Dev<bf16> dq = dev_bf16(q), dk = dev_bf16(k), dv = dev_bf16(v), dab = dev_bf16(lab),
                      o_ref(B * H * D), o_contig(B * H * D), o_slots(B * H * D);
            Dev<float> dA = dev_f32(A_log), ddt = dev_f32(dt_bias), dg(B * H), dbeta(B * H);
            Dev<float> s_ref = dev_f32(states), s_contig = dev_f32(states), s_pool = dev_f32(pool);
            Dev<int32_t> dslots = dev_i32(slots);
            const float scale = float(1.0 / std::sqrt(double(D)));
            cuda::gdn_gates_forward(dg.p(), dbeta.p(), dab.p(), dab.p() + H, ab, dA.p(), ddt.p(), B, H, neg);
            cuda::gdn_decode_step(B, H, H, D, dq.p(), dk.p(), dv.p(), dg.p(), dbeta.p(), s_ref.p(), s_ref.p(),
                                  o_ref.p(), scale, true);
            cuda::GdnGateInputs gi;
            gi.a = dab.p(), gi.b = dab.p() + H, gi.ab_stride = ab, gi.A_log = dA.p(), gi.dt_bias = ddt.p();
            gi.allow_neg_eigval = neg;
            cuda::gdn_decode_step_gated(B, H, H, D, dq.p(), dk.p(), dv.p(), gi, s_contig.p(), nullptr, 0,
                                        o_contig.p(), scale, true);
            cuda::gdn_decode_step_gated(B, H, H, D, dq.p(), dk.p(), dv.p(), gi, s_pool.p(), dslots.p(),
                                        stride, o_slots.p(), scale, true);
            const std::string at = ", D=" + std::to_string(D) + (neg ? ", negative eigenvalues" : "");
            expect_exact("gated decode output, contiguous" + at, bit_mismatches(host(o_contig), host(o_ref)));
            expect_exact("gated decode output, slots" + at, bit_mismatches(host(o_slots), host(o_ref)));
            expect_exact("gated decode states, contiguous" + at, bit_mismatches(host(s_contig), host(s_ref)));
            const std::vector<float> ref = host(s_ref), got = host(s_pool);
            std::vector<float> gs;
            for (int b = 0; b < B; ++b)
                gs.insert(gs.end(), got.begin() + slots[size_t(b)] * stride,
                          got.begin() + slots[size_t(b)] * stride + S);
            expect_exact("gated decode states, slots" + at, bit_mismatches(gs, ref));
        }
    }
}

TEST(GpuBatchDecodeOps, ShortConvWithSlotsMatchesPerSequence) {
    Rng rng = case_rng("ShortConvSlots");
    const int64_t B = 3, D = 256, W = 4, xs = 3 * D + 64, stride = (W - 1) * D + 32, n_slots = 4;
    const std::vector<int32_t> slots = {2, 3, 0};
    const std::vector<float> x = bf16_values(size_t(B * xs), rng), w = f32_values(size_t(D * W), rng, 0.5f);
    const std::vector<float> pool = f32_values(size_t(n_slots * stride), rng);
    std::vector<float> prev;
    for (int64_t b = 0; b < B; ++b)
        prev.insert(prev.end(), pool.begin() + slots[size_t(b)] * stride,
                    pool.begin() + slots[size_t(b)] * stride + (W - 1) * D);
    Dev<bf16> dx = dev_bf16(x), o1(B * D), o2(B * D);
    Dev<float> dw = dev_f32(w), dprev = dev_f32(prev), dpool = dev_f32(pool);
    Dev<int32_t> dslots = dev_i32(slots);
    cuda::short_conv_forward(o1.p(), dprev.p(), dx.p(), xs, dw.p(), dprev.p(), B, 1, D, W);
    cuda::short_conv_forward_slots(o2.p(), dpool.p(), dslots.p(), stride, dx.p(), xs, dw.p(), B, 1, D, W);
    expect_exact("short conv output, slots against per sequence", bit_mismatches(host(o2), host(o1)));
    const std::vector<float> ref = host(dprev), got = host(dpool);
    std::vector<float> gw;
    for (int64_t b = 0; b < B; ++b)
        gw.insert(gw.end(), got.begin() + slots[size_t(b)] * stride,
                  got.begin() + slots[size_t(b)] * stride + (W - 1) * D);
    expect_exact("short conv next windows", bit_mismatches(gw, ref));
}

TEST(GpuBatchDecodeOps, RopeRowsMatchesDecodeAtEachPosition) {
    Rng rng = case_rng("RopeRows");
    const int64_t H = 12, Dh = 64, R = 64, stride = H * Dh + 64;
    const std::vector<int32_t> pos = {0, 17, 5000, 3};
    const int64_t B = int64_t(pos.size());
    const std::vector<float> x = bf16_values(size_t(B * stride), rng);
    const cuda::RopeFreqs f = cuda::RopeFreqs::plain(100000.0, R);
    Dev<bf16> dx = dev_bf16(x);
    Dev<int32_t> dpos = dev_i32(pos);
    cuda::rope_forward_rows(dx.p(), stride, B, H, Dh, R, dpos.p(), f);
    const std::vector<float> got = host(dx);
    for (int64_t b = 0; b < B; ++b) {
        Dev<bf16> one = dev_bf16(std::vector<float>(x.begin() + b * stride, x.begin() + b * stride + H * Dh));
        cuda::rope_forward_decode(one.p(), H, Dh, R, dpos.p() + b, f);
        expect_exact(
            "rope_forward_rows row " + std::to_string(b),
            bit_mismatches(std::vector<float>(got.begin() + b * stride, got.begin() + b * stride + H * Dh),
                           host(one)));
    }
}

}  // namespace hydra::gputest
