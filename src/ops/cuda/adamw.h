// Fused AdamW over the whole fp32 parameter arena on the GPU, plus the arena-wide gradient helpers
// around it: global gradient norm (deterministic two-pass reduction, with a non-finite count in the
// same pass), clipping, and zeroing. Same update as the CPU reference train/adamw.h
// (torch.optim.AdamW, foreach=False), element for element:
//   lr = config.lr * span.lr_scale (float);  decay = float(1 - double(lr) * wd * span.wd_scale)
//   step_size = float(double(lr) / (1 - beta1^t));  inv_bc2 = float(1 / sqrt(1 - beta2^t))
//   g = grad * grad_factor;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p * decay - step_size * m / (sqrt(v) * inv_bc2 + eps)
// with t the number of step() calls (one counter for the arena). The same kernel writes the new
// fp32 master p and, where the span has a mirror, bf16(p) into the bf16 mirror arena (same offsets).
// Frozen spans (trainable = false) and padding between spans are never read or written (params, m,
// v, mirror stay bit-identical); grad_norm / clip skip them too, like the CPU helpers.
//
// Spans come from train/param_groups.h's ParamSpan (copy offset, size, lr_scale, wd_scale,
// trainable); this header does not include train/ (ops sit below train in the layering).
// Work is split into fixed chunks of at most kChunk elements of one span (a table built once), so
// results never depend on the launch configuration and the norm is bitwise reproducible.
// Everything is asynchronous on `stream` except where a function says it synchronises.
// ZeRO stage 1 (data parallel): the state m, v may cover only a range [state_begin, state_end) of the arena
// (this rank's shard, train/zero_shards.h); the spans must then lie inside it, m() / v() hold the range's
// elements (m()[0] is arena element state_begin), and step / grad_norm touch only the range.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

struct AdamWHyper {
    float lr = 1e-3f;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

struct AdamWSpan {
    int64_t offset = 0, size = 0;  // elements of the arena
    float lr_scale = 1.0f, wd_scale = 1.0f;
    bool trainable = true;
    bool mirror = true;  // write bf16(p) into the mirror arena (when a mirror pointer is given)
};

// Device record written by grad_norm().
struct GradNormResult {
    double sumsq = 0;         // sum of g^2 over trainable spans (double)
    double norm = 0;          // sqrt(sumsq)
    long long nonfinite = 0;  // NaN / +-Inf gradients among trainable spans
    long long pad = 0;
};

class DeviceAdamW {
public:
    static constexpr int64_t kChunk = 8192;

    // Optimizer state m, v (n_total fp32 each, zeroed) on the device. Spans are checked against
    // the arena (throws naming the span) and turned into the chunk table.
    // state_end < 0: the state covers the whole arena (state_begin must be 0 then). state_begin must be a
    // multiple of 16 (aligned vector accesses).
    DeviceAdamW(const AdamWHyper& hyper, int64_t n_total, const std::vector<AdamWSpan>& spans,
                cudaStream_t stream = nullptr, int64_t state_begin = 0, int64_t state_end = -1);
    ~DeviceAdamW();
    DeviceAdamW(const DeviceAdamW&) = delete;
    DeviceAdamW& operator=(const DeviceAdamW&) = delete;

    AdamWHyper& hyper() { return hyper_; }
    void set_lr(float lr) { hyper_.lr = lr; }
    int64_t size() const { return n_total_; }
    // Elements of m() and v() (state_end - state_begin) and the arena element of their first one.
    int64_t state_size() const { return state_end_ - state_begin_; }
    int64_t state_begin() const { return state_begin_; }

    // One optimizer step (t += 1): params (n_total) fp32 updated in place, mirror (n_total bf16,
    // may be null) refreshed for the spans with mirror = true, grads (n_total) read, times
    // grad_factor (the clip coefficient can be folded in here instead of calling clip_grads).
    // grad_factor_dev, when non-null, is a device float read by the kernel and multiplied in too
    // (a clip coefficient computed on the device, no host round trip).
    void step(float* params, bf16* mirror, const float* grads, cudaStream_t stream = nullptr,
              float grad_factor = 1.0f, const float* grad_factor_dev = nullptr);

    // Global L2 norm of the trainable gradients and their non-finite count into the device record
    // result() (deterministic: per-chunk fp64 partials, then one block sums them in chunk order).
    void grad_norm(const float* grads, cudaStream_t stream = nullptr);
    GradNormResult* result() const { return result_; }
    // Copies result() to the host (synchronises `stream`).
    GradNormResult read_result(cudaStream_t stream = nullptr) const;
    // The CPU helper clip_grads' coefficient for max_norm: max_norm / (norm + 1e-6) when < 1, else 1.
    static double clip_coefficient(double norm, double max_norm);
    // grads *= factor on the trainable spans (torch clip_grad_norm_'s rescale).
    void clip_grads(float* grads, float factor, cudaStream_t stream = nullptr);

    // Optimizer state for checkpoints (device pointers, state_size() each) and the step counter.
    float* m() const { return m_; }
    float* v() const { return v_; }
    int64_t step_count() const { return step_; }
    void set_step_count(int64_t t);
    // Restores m, v from host arrays of n == state_size() elements and the counter (synchronous).
    void load_state(const float* m_host, const float* v_host, int64_t n, int64_t step);
    void save_state(float* m_host, float* v_host, cudaStream_t stream = nullptr) const;  // synchronous

private:
    AdamWHyper hyper_;
    int64_t n_total_ = 0, step_ = 0;
    int64_t state_begin_ = 0, state_end_ = 0;
    std::vector<AdamWSpan> spans_;
    int n_chunks_ = 0;
    void* chunks_ = nullptr;      // device chunk table (offset, size, span index)
    void* span_params_ = nullptr;  // device per-span (lr_scale, wd_scale, mirror)
    float *m_ = nullptr, *v_ = nullptr;
    double* partial_ = nullptr;   // per-chunk sum of squares
    long long* partial_bad_ = nullptr;
    GradNormResult* result_ = nullptr;
};

// Zeroes the whole gradient arena (n_total fp32, padding included).
void zero_grads(float* grads, int64_t n_total, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
