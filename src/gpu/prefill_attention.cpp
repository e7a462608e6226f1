// Prefill / continuation attention over contiguous K / V rows (see prefill_attention.h): cuDNN's fused
// inference engine where it runs, our flash or decode kernels otherwise.
#include "gpu/prefill_attention.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "gpu/decode_attention.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"

namespace hydra::gpu {

namespace {

template <typename T>
T* grown(cuda::DeviceBuffer<T>& b, int64_t n) {
    if (b.size() < n) b.resize(n);  // cudaFree inside waits for pending work on the old buffer
    return b.data();
}

}  // namespace

PrefillAttention::Backend PrefillAttention::backend_from_env() {
    const char* e = std::getenv("HYDRA_PREFILL_ATTN");
    if (!e || !*e) return Backend::Auto;
    const std::string v(e);
    if (v == "auto") return Backend::Auto;
    if (v == "cudnn") return Backend::Cudnn;
    if (v == "own") return Backend::Own;
    fail("HYDRA_PREFILL_ATTN='{}': expected auto, cudnn or own", v);
}

PrefillAttention::PrefillAttention(Backend backend)
    : backend_(backend), admission_(PlanAdmission::after_from_env(std::getenv("HYDRA_PREFILL_CUDNN_AFTER"))) {
    if (const char* e = std::getenv("HYDRA_PREFILL_OFFSET"); e && *e) {
        const std::string v(e);
        HYDRA_CHECK(v == "flash" || v == "decode", "HYDRA_PREFILL_OFFSET='{}': expected flash or decode", v);
        flash_offset_ = v == "flash";
    }
}

const __nv_bfloat16* PrefillAttention::packed_q(const __nv_bfloat16* q, int64_t ld_q, int64_t T,
                                                int64_t width, cudaStream_t stream) {
    if (ld_q == 0 || ld_q == width) return q;
    __nv_bfloat16* dst = grown(qbuf_, T * width);
    CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(width) * sizeof(__nv_bfloat16), q,
                                 size_t(ld_q) * sizeof(__nv_bfloat16), size_t(width) * sizeof(__nv_bfloat16),
                                 size_t(T), cudaMemcpyDeviceToDevice, stream));
    return dst;
}

const int32_t* PrefillAttention::uniform_index(int64_t n_fa, int64_t n_kv, cudaStream_t stream) {
    std::vector<int32_t> want(static_cast<size_t>(n_fa));
    for (int64_t h = 0; h < n_fa; ++h) want[size_t(h)] = int32_t(h / (n_fa / n_kv));
    if (want != index_host_) {
        // the previous map may still be read by queued kernels: wait before overwriting it
        CUDA_CHECK(cudaStreamSynchronize(stream));
        index_host_ = std::move(want);
        grown(index_, n_fa);
        CUDA_CHECK(cudaMemcpy(index_.data(), index_host_.data(), size_t(n_fa) * sizeof(int32_t),
                              cudaMemcpyHostToDevice));
    }
    return index_.data();
}

bool PrefillAttention::try_cudnn(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q,
                                 const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* kv_index,
                                 bool uniform_groups, int64_t T, int64_t pos0, int64_t n_fa, int64_t n_kv,
                                 int64_t Dh, float scale, cudaStream_t stream) {
    const int64_t S = pos0 + T, width = n_fa * Dh;
    cuda::AttnInferShape s;
    s.B = 1, s.T = int(T), s.S = int(S), s.H = int(n_fa), s.Hkv = int(uniform_groups ? n_kv : n_fa),
    s.D = int(Dh);
    s.ld_q = ld_q == width ? 0 : int(ld_q), s.ld_kv = 0;
    if (!cudnn_.supports_inference(s)) {
        if (s.ld_q == 0) {
            cudnn_reason_ = cudnn_.reason();
            return false;
        }
        s.ld_q = 0;  // an engine may want q packed: try once more with a copy
        if (!cudnn_.supports_inference(s)) {
            cudnn_reason_ = cudnn_.reason();
            return false;
        }
    }
    const __nv_bfloat16* qq = s.ld_q == 0 ? packed_q(q, ld_q, T, width, stream) : q;
    const __nv_bfloat16* kk = k;
    const __nv_bfloat16* vv = v;
    if (!uniform_groups) {  // head granularity: each FA head gets its own copy of its group's S key / value
                            // rows
        __nv_bfloat16* kd = grown(kdup_, S * width);
        __nv_bfloat16* vd = grown(vdup_, S * width);
        cuda::gather_heads(kd, k, kv_index, S, n_kv, n_fa, Dh, stream);
        cuda::gather_heads(vd, v, kv_index, S, n_kv, n_fa, Dh, stream);
        kk = kd, vv = vd;
    }
    cudnn_.forward_inference(s, qq, kk, vv, o, scale, stream);
    last_path_ = "cudnn";
    cudnn_reason_.clear();
    return true;
}

void PrefillAttention::own(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, const int32_t* kv_index, bool uniform_groups, int64_t T,
                           int64_t pos0, int64_t n_fa, int64_t n_kv, int64_t Dh, float scale,
                           cudaStream_t stream, const DecodeWindows& windows) {
    const int64_t width = n_fa * Dh, ldq = ld_q ? ld_q : width;
    if (pos0 == 0 || flash_offset_) {
        // the flash kernel over the S = pos0 + T cached rows, query row t at position pos0 + t
        const int64_t S = pos0 + T;
        const __nv_bfloat16* qq = packed_q(q, ld_q, T, width, stream);  // the flash kernel reads q packed
        const __nv_bfloat16* kk = k;
        const __nv_bfloat16* vv = v;
        int64_t hkv = n_kv;
        if (!uniform_groups) {
            __nv_bfloat16* kd = grown(kdup_, S * width);
            __nv_bfloat16* vd = grown(vdup_, S * width);
            cuda::gather_heads(kd, k, kv_index, S, n_kv, n_fa, Dh, stream);
            cuda::gather_heads(vd, v, kv_index, S, n_kv, n_fa, Dh, stream);
            kk = kd, vv = vd, hkv = n_fa;
        }
        cuda::AttnShape s;
        s.B = 1, s.T = int(T), s.S = int(S), s.H = int(n_fa), s.Hkv = int(hkv), s.D = int(Dh);
        s.window = windows.window, s.sinks = int(windows.sinks);
        cuda::attention_forward(s, qq, kk, vv, o, grown(lse_, T * n_fa), scale, stream);
        last_path_ = pos0 == 0 ? "flash" : "flash-offset";
        return;
    }
    // a query offset: one decode launch per row, row t over the keys [0, pos0 + t]
    const int32_t* idx = kv_index ? kv_index : uniform_index(n_fa, n_kv, stream);
    float* partials = ensure_decode_attention_workspace(
        partials_, int64_t(decode_attention_workspace_floats(n_fa, Dh, pos0 + T)), stream);
    for (int64_t t = 0; t < T; ++t)
        decode_attention(o + t * width, q + t * ldq, k, v, idx, n_fa, n_kv, Dh, pos0 + t + 1, scale, partials,
                         stream, windows);
    last_path_ = "decode";
}

void PrefillAttention::forward(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, const int32_t* kv_index, bool uniform_groups,
                               int64_t T, int64_t pos0, int64_t n_fa, int64_t n_kv, int64_t Dh, float scale,
                               cudaStream_t stream, const DecodeWindows& windows) {
    HYDRA_CHECK(T >= 1 && pos0 >= 0, "prefill attention of {} queries at position {}", T, pos0);
    HYDRA_CHECK(pos0 + T < (int64_t(1) << 31), "prefill attention over {} keys: more than int32 positions",
                pos0 + T);
    HYDRA_CHECK(n_fa >= 1 && n_kv >= 1, "prefill attention with {} query heads over {} KV heads", n_fa, n_kv);
    HYDRA_CHECK(Dh == 64 || Dh == 128, "prefill attention: head dim {} (64 or 128)", Dh);
    HYDRA_CHECK(!uniform_groups || n_fa % n_kv == 0,
                "prefill attention: {} query heads are not uniform groups of {} KV heads", n_fa, n_kv);
    HYDRA_CHECK(uniform_groups || kv_index, "prefill attention: non-uniform groups need kv_index");
    HYDRA_CHECK(ld_q == 0 || ld_q >= n_fa * Dh, "prefill attention: q rows {} apart are narrower than {}",
                ld_q, n_fa * Dh);
    HYDRA_CHECK(o && q && k && v, "prefill attention: null operand");
    // the shape cuDNN would plan for (the head map is part of it: uniform or gathered groups); a collision of
    // two shapes only moves when cuDNN starts for them
    const uint64_t shape = (uint64_t(T) << 34) ^ (uint64_t(pos0 + T) << 2) ^ (uint64_t(n_fa) << 56) ^
                           (uint64_t(n_kv) << 48) ^ (uint64_t(Dh) << 40) ^ (uint64_t(ld_q) << 20) ^
                           (uniform_groups ? 1u : 0u);
    HYDRA_CHECK(windows.sinks >= 0, "prefill attention: {} attention sinks", windows.sinks);
    if (windows.window) {
        HYDRA_CHECK(backend_ != Backend::Cudnn, "cuDNN prefill attention has no sliding-window heads");
        cudnn_reason_ = "sliding-window heads run our kernels";
    } else if (backend_ == Backend::Auto && !admission_.admit(shape)) {
        cudnn_reason_ = "a shape's first sightings run our kernels (HYDRA_PREFILL_CUDNN_AFTER)";
    } else if (backend_ != Backend::Own) {
        if (try_cudnn(o, q, ld_q, k, v, kv_index, uniform_groups, T, pos0, n_fa, n_kv, Dh, scale, stream))
            return;
        HYDRA_CHECK(backend_ != Backend::Cudnn, "cuDNN prefill attention (T {}, pos0 {}) unavailable: {}", T,
                    pos0, cudnn_reason_);
    } else {
        cudnn_reason_ = "our kernels chosen (HYDRA_PREFILL_ATTN=own)";
    }
    own(o, q, ld_q, k, v, kv_index, uniform_groups, T, pos0, n_fa, n_kv, Dh, scale, stream, windows);
}

}  // namespace hydra::gpu
