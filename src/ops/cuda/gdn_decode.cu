// The GDN one-token decode step (gdn_chunk.h's gdn_decode_step): the recurrence for one token per sequence,
// straight on the fp32 state, which is read and written once.
#include "ops/cuda/gdn_device.cuh"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using gdn::warp_sum;

// One block = 4 warps x ROWS state rows of one (sequence, value head); each lane holds D/32 columns of
// each of its warp's rows, so the state is read and written exactly once with 8- or 16-byte accesses.
// With gates.a set, the pair's g and beta come from the gate projections (gdn_gates.h's forward, in place)
// instead of from g and beta.
template <int D, int ROWS>
__global__ void __launch_bounds__(128)
    gdn_decode_kernel(int H, int HV, const bf16* __restrict__ q, const bf16* __restrict__ k,
                      const bf16* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                      GdnGateInputs gates, const float* state_in, float* state_out, bf16* __restrict__ o,
                      float scale, int l2norm, const int32_t* __restrict__ slots, int64_t slot_stride) {
    constexpr int PER = D / 32;
    const int bj = blockIdx.y, b = bj / HV, j = bj % HV, h = j / (HV / H);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * 4 + warp) * ROWS;
    // the pair's state: its own (B, HV) entry, or in the slot pool at its sequence's slot
    const size_t sbase =
        slots ? size_t(slots[b]) * size_t(slot_stride) + (size_t(j) * D + row0) * D + lane * PER
              : (size_t(bj) * D + row0) * D + lane * PER;
    float m[ROWS][PER];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const float* src = state_in + sbase + size_t(r) * D;
        if constexpr (PER == 4) {
            const float4 x = __ldcs(reinterpret_cast<const float4*>(src));
            m[r][0] = x.x, m[r][1] = x.y, m[r][2] = x.z, m[r][3] = x.w;
        } else {
            const float2 x = __ldcs(reinterpret_cast<const float2*>(src));
            m[r][0] = x.x, m[r][1] = x.y;
        }
    }
    float qv[PER], kv[PER];
    const bf16* qr = q + (size_t(b) * H + h) * D + lane * PER;
    const bf16* kr = k + (size_t(b) * H + h) * D + lane * PER;
#pragma unroll
    for (int i = 0; i < PER; ++i) qv[i] = __bfloat162float(qr[i]), kv[i] = __bfloat162float(kr[i]);
    float qs = scale, ks = 1.f;
    if (l2norm) {
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) sq += qv[i] * qv[i], sk += kv[i] * kv[i];
        sq = warp_sum(sq), sk = warp_sum(sk);
        qs = scale / sqrtf(sq + 1e-6f), ks = 1.f / sqrtf(sk + 1e-6f);
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) qv[i] *= qs, kv[i] *= ks;
    float alpha, bt;
    if (gates.a) {
        const size_t ab = size_t(b) * size_t(gates.ab_stride) + size_t(j);
        alpha = expf(detail::gdn_log_decay(__bfloat162float(gates.a[ab]), gates.A_log[j], gates.dt_bias[j]));
        bt = (gates.allow_neg_eigval ? 2.f : 1.f) * detail::sigmoidf_(__bfloat162float(gates.b[ab]));
    } else {
        alpha = expf(g[bj]), bt = beta[bj];
    }
    float e[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float x = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) x += m[r][i] * kv[i];
        e[r] = x;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) e[r] += __shfl_xor_sync(0xffffffffu, e[r], off);
    const bf16* vr = v + size_t(bj) * D + row0;
    float ov[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const float delta = bt * (__bfloat162float(vr[r]) - alpha * e[r]);
        float x = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            m[r][i] = alpha * m[r][i] + delta * kv[i];
            x += m[r][i] * qv[i];
        }
        ov[r] = x;
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float* dst = state_out + sbase + size_t(r) * D;
        if constexpr (PER == 4)
            __stcs(reinterpret_cast<float4*>(dst), make_float4(m[r][0], m[r][1], m[r][2], m[r][3]));
        else
            __stcs(reinterpret_cast<float2*>(dst), make_float2(m[r][0], m[r][1]));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) ov[r] += __shfl_xor_sync(0xffffffffu, ov[r], off);
    if (lane < ROWS) {
        float x = ov[0];
#pragma unroll
        for (int r = 1; r < ROWS; ++r)
            if (lane == r) x = ov[r];
        o[size_t(bj) * D + row0 + lane] = __float2bfloat16(x);
    }
}

}  // namespace

namespace {

void launch_decode(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v, const float* g,
                   const float* beta, const GdnGateInputs& gates, const float* state_in, float* state_out,
                   bf16* o, float scale, bool l2norm_qk, const int32_t* slots, int64_t slot_stride,
                   cudaStream_t stream) {
    gdn::check_shape({B, 1, H, HV, D});
    constexpr int ROWS = 8;
    const dim3 grid(unsigned(D / (4 * ROWS)), unsigned(B * HV));
    if (D == 64)
        gdn_decode_kernel<64, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, gates, state_in,
                                                              state_out, o, scale, l2norm_qk ? 1 : 0, slots,
                                                              slot_stride);
    else
        gdn_decode_kernel<128, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, gates, state_in,
                                                               state_out, o, scale, l2norm_qk ? 1 : 0, slots,
                                                               slot_stride);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gdn_decode_step(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v, const float* g,
                     const float* beta, const float* state_in, float* state_out, bf16* o, float scale,
                     bool l2norm_qk, cudaStream_t stream) {
    launch_decode(B, H, HV, D, q, k, v, g, beta, GdnGateInputs{}, state_in, state_out, o, scale, l2norm_qk,
                  nullptr, 0, stream);
}

void gdn_decode_step_slots(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v,
                           const float* g, const float* beta, float* states, const int32_t* slots,
                           int64_t slot_stride, bf16* o, float scale, bool l2norm_qk, cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(states != nullptr && slots != nullptr && slot_stride >= int64_t(HV) * D * D,
                       "gdn_decode_step_slots: states, slots and a slot stride >= HV D D are required");
    launch_decode(B, H, HV, D, q, k, v, g, beta, GdnGateInputs{}, states, states, o, scale, l2norm_qk, slots,
                  slot_stride, stream);
}

void gdn_decode_step_gated(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v,
                           const GdnGateInputs& gates, float* states, const int32_t* slots,
                           int64_t slot_stride, bf16* o, float scale, bool l2norm_qk, cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(
        gates.a && gates.b && gates.A_log && gates.dt_bias && gates.ab_stride >= HV,
        "gdn_decode_step_gated: the gate projections a, b (rows >= HV apart), A_log and dt_bias");
    HYDRA_CUDA_REQUIRE(states != nullptr && (!slots || slot_stride >= int64_t(HV) * D * D),
                       "gdn_decode_step_gated: states, and a slot stride >= HV D D with slots");
    launch_decode(B, H, HV, D, q, k, v, nullptr, nullptr, gates, states, states, o, scale, l2norm_qk, slots,
                  slot_stride, stream);
}

}  // namespace hydra::cuda
