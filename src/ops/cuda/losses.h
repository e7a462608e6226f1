// Training losses through the LM head on the GPU without materialising the (N, V) logits: next-token
// cross-entropy, distillation tau^2 * KL(teacher || student), and sum-of-squares MSE. Same functions,
// sums and scalings as the CPU reference train/losses.h (the loss is the plain SUM over counted rows;
// grad_scale multiplies only the gradients, e.g. weight / count for a mean).
//
// LM-head losses: hidden h (N, C) bf16 (after the final norm), head W (V, C) bf16. Rows in blocks of
// `row_block`, the vocabulary in chunks of `vocab_chunk`; per tile one cuBLAS GEMM builds the fp32
// logits (rb, vc) = h_blk @ W_chunk^T (times 1/tau for KL). Pass 1 folds each tile into per-row
// online log-sum-exp statistics (fp32 running max + rescaled sum; for KL also the teacher's and the
// cross term sum exp(zt - mt) (zt - zs)). Pass 2 recomputes each tile (unless vocab_chunk >= V: then
// the one tile per row block is still there and the logits GEMM runs once), turns it into the bf16 logit
// gradient G (rb, vc) and runs two GEMMs: dh_blk (fp32) += G @ W_chunk, dW_chunk (fp32) += G^T @ h_blk.
// Device memory: the workspace only, O(row_block * vocab_chunk) (two fp32 tiles + one bf16 tile).
//
// Results: losses are ACCUMULATED (+=) into a device LossTotals (zero it with zero_totals() first),
// so CE and KL of one step, or several micro-batches, can share one; per row block the row losses are
// summed in a fixed order (deterministic). Everything is asynchronous on the BlasContext's stream;
// read_totals() synchronises.
//
// Gradient outputs (LmHeadGrads): dh fp32 (N, C) or bf16 (N, C) (at most one), OVERWRITTEN unless
// accumulate_dh (then dh += ...; fp32 accumulate is exact GEMM beta = 1, bf16 is read-add-round);
// rows that do not count (ignored target / masked) get 0 (or are left unchanged when accumulating).
// dW fp32 (V, C) ACCUMULATED (+=). Null pointers skip that gradient; with neither, only the loss runs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/gemm.h"

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// Device-side loss accumulators (one 32-byte record in device memory).
struct LossTotals {
    double loss = 0;        // summed loss of the counted rows / elements
    long long count = 0;    // counted rows / elements
    long long invalid = 0;  // CE: targets outside [-1, V) (treated as ignored; the CPU version throws)
    long long pad = 0;
};

void zero_totals(LossTotals* d_totals, cudaStream_t stream = nullptr);
// Copies the totals to the host (synchronises `stream`).
LossTotals read_totals(const LossTotals* d_totals, cudaStream_t stream = nullptr);

struct LmHeadChunking {
    int64_t row_block = 2048;
    int64_t vocab_chunk = 8192;
};

// Scratch of the LM-head losses for tiles of (row_block, vocab_chunk); reusable across calls and
// losses (not concurrently). kl = true adds the teacher's tile and statistics. max_C: the largest
// hidden size used with a bf16 dh (its fp32 row-block accumulator); 0 = no bf16 dh.
class LmHeadLossWorkspace {
public:
    LmHeadLossWorkspace(const LmHeadChunking& chunking, bool kl, int64_t max_C = 0);
    ~LmHeadLossWorkspace();
    LmHeadLossWorkspace(const LmHeadLossWorkspace&) = delete;
    LmHeadLossWorkspace& operator=(const LmHeadLossWorkspace&) = delete;

    LmHeadChunking chunking;
    bool kl = false;
    int64_t max_C = 0;
    size_t bytes = 0;  // device memory held
    float *zs = nullptr, *zt = nullptr;  // logits tiles (rb * vc) fp32 (zt: KL only)
    bf16* g = nullptr;                   // logit-gradient tile (rb * vc) bf16
    // per-row statistics (rb each): student / teacher running max and sum, KL cross term, the CE
    // target's logit, the finished log-sum-exps
    float *s_max = nullptr, *s_sum = nullptr, *t_max = nullptr, *t_sum = nullptr, *cross = nullptr;
    float *target_logit = nullptr, *s_lse = nullptr, *t_lse = nullptr;
    float* dh_acc = nullptr;  // (rb, max_C) fp32, bf16 dh only

private:
    void* base_ = nullptr;
};

struct LmHeadGrads {
    float* dh_f32 = nullptr;   // (N, C) or null
    bf16* dh_bf16 = nullptr;   // (N, C) or null (needs a workspace with max_C >= C)
    bool accumulate_dh = false;
    float* dW = nullptr;       // (V, C) fp32 +=, or null
    float grad_scale = 1.0f;   // multiplies dh and dW
};

// Cross-entropy of softmax(h @ W^T) against targets (device int32, N; -1 = ignore), natural log:
// totals.loss += sum over rows with 0 <= target < V of (lse - z_target), totals.count += those rows.
//   h (N, C) bf16, W (V, C) bf16; gradient of grad_scale * sum loss (see LmHeadGrads).
void cross_entropy_lm_head(BlasContext& ctx, const bf16* h, const bf16* W, const int32_t* targets, int64_t N,
                           int64_t C, int64_t V, const LmHeadGrads& grads, LossTotals* d_totals,
                           LmHeadLossWorkspace& ws);

// tau^2 * KL(p_t || p_s) per row, p_s = softmax(h_s @ W_s^T / tau), p_t = softmax(h_t @ W_t^T / tau),
// over rows whose row_mask entry is nonzero (device uint8, N; null = all rows): totals.loss += sum
// over those rows, totals.count += their number. Rows outside the mask count nothing and get zero
// gradient, which equals the CPU trainer's compaction to the kept rows (model_step.cpp): pass
// grad_scale = kl_weight / kept_rows for the mean, and set row_mask[n] = (n % seq_len <
// kl_max_position) for the longctx stage. No gradient reaches the teacher.
//   h_s (N, Cs), W_s (V, Cs), h_t (N, Ct), W_t (V, Ct) bf16; d(loss)/d(raw student logits) =
//   grad_scale * tau * (p_s - p_t).
void kl_lm_head(BlasContext& ctx, const bf16* h_s, const bf16* W_s, int64_t Cs, const bf16* h_t, const bf16* W_t,
                int64_t Ct, const uint8_t* row_mask, int64_t N, int64_t V, float tau, const LmHeadGrads& grads,
                LossTotals* d_totals, LmHeadLossWorkspace& ws);

// Scratch of mse(): per-block partial sums (deterministic two-pass reduction).
class MseWorkspace {
public:
    MseWorkspace();
    ~MseWorkspace();
    MseWorkspace(const MseWorkspace&) = delete;
    MseWorkspace& operator=(const MseWorkspace&) = delete;
    static constexpr int kBlocks = 1024;
    double* partial = nullptr;  // (kBlocks)
};

// totals.loss += sum_i (a_i - target_i)^2 over n elements (fp32), totals.count += n.
// da (n) fp32: OVERWRITTEN with grad_scale * 2 * (a - target) (accumulate: +=), or null.
void mse(const float* a, const float* target, int64_t n, float* da, bool accumulate, float grad_scale,
         LossTotals* d_totals, MseWorkspace& ws, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
