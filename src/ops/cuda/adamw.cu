// Fused AdamW, gradient norm, clipping and zeroing over the fp32 parameter arena (see adamw.h).
// One thread block per chunk of the chunk table (<= kChunk elements of one trainable span).
#include "ops/cuda/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::cuda {

namespace {

struct Chunk {
    int64_t offset;  // arena element where the chunk starts
    int32_t size;    // elements (<= kChunk)
    int32_t span;    // index into the span parameters
};

struct SpanParam {
    float lr_scale, wd_scale;
    int32_t mirror;
    int32_t pad;
};

constexpr int kThreads = 256;

bool aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

__global__ void adamw_kernel(const Chunk* __restrict__ chunks, const SpanParam* __restrict__ sp,
                             float* __restrict__ p, bf16* __restrict__ mirror, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t base, float lr_base,
                             float wd, float b1, float b2, float eps, double bc1, float inv_bc2_sqrt,
                             float grad_factor, const float* __restrict__ grad_factor_dev, bool vec_ok) {
    __shared__ float s_decay, s_step;
    const Chunk c = chunks[blockIdx.x];
    const SpanParam s = sp[c.span];
    if (threadIdx.x == 0) {  // the CPU's per-span scalars, same roundings (train/adamw.cpp)
        const float lr = lr_base * s.lr_scale;
        s_decay = float(1.0 - double(lr) * double(wd) * double(s.wd_scale));
        s_step = float(double(lr) / bc1);
    }
    __syncthreads();
    const float decay = s_decay, step_size = s_step;
    const float gf = grad_factor_dev ? grad_factor * *grad_factor_dev : grad_factor;
    const float one_m_b1 = 1.0f - b1, one_m_b2 = 1.0f - b2;
    const bool do_mirror = mirror && s.mirror;
    // one element's update (the same arithmetic on both paths below, so they agree bit for bit)
    auto update = [&](float gi, float& mi, float& vi, float& pi) {
        gi = gf == 1.0f ? gi : gi * gf;
        mi = b1 * mi + one_m_b1 * gi;
        vi = b2 * vi + one_m_b2 * gi * gi;
        const float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
        pi = pi * decay - step_size * mi / denom;
    };
    int k0 = 0;
    if (vec_ok && (c.offset & 3) == 0) {
        // 16-byte accesses for the chunk's whole groups of 4 (the update moves ~30 bytes per element: it is
        // bound by memory, and the wide accesses keep more bytes in flight per thread)
        const int n4 = c.size >> 2;
        const float4* g4 = reinterpret_cast<const float4*>(g + c.offset);
        float4* m4 = reinterpret_cast<float4*>(m + (c.offset - base));
        float4* v4 = reinterpret_cast<float4*>(v + (c.offset - base));
        float4* p4 = reinterpret_cast<float4*>(p + c.offset);
        for (int k = threadIdx.x; k < n4; k += blockDim.x) {
            const float4 gg = g4[k];
            float4 mm = m4[k], vv = v4[k], pp = p4[k];
            update(gg.x, mm.x, vv.x, pp.x);
            update(gg.y, mm.y, vv.y, pp.y);
            update(gg.z, mm.z, vv.z, pp.z);
            update(gg.w, mm.w, vv.w, pp.w);
            m4[k] = mm;
            v4[k] = vv;
            p4[k] = pp;
            if (do_mirror) {
                const __nv_bfloat162 a = __floats2bfloat162_rn(pp.x, pp.y),
                                     b = __floats2bfloat162_rn(pp.z, pp.w);
                uint2 u;
                u.x = *reinterpret_cast<const uint32_t*>(&a);
                u.y = *reinterpret_cast<const uint32_t*>(&b);
                *reinterpret_cast<uint2*>(mirror + c.offset + 4 * int64_t(k)) = u;
            }
        }
        k0 = n4 << 2;
    }
    for (int k = k0 + int(threadIdx.x); k < c.size; k += blockDim.x) {
        const int64_t i = c.offset + k, j = i - base;
        float mi = m[j], vi = v[j], pi = p[i];
        update(g[i], mi, vi, pi);
        m[j] = mi;
        v[j] = vi;
        p[i] = pi;
        if (do_mirror) mirror[i] = __float2bfloat16(pi);
    }
}

__global__ void norm_partial_kernel(const Chunk* __restrict__ chunks, const float* __restrict__ g, double* partial,
                                    long long* partial_bad) {
    __shared__ double sh[32];
    __shared__ long long shb[32];
    const Chunk c = chunks[blockIdx.x];
    double s = 0;
    long long bad = 0;
    for (int k = threadIdx.x; k < c.size; k += blockDim.x) {
        const float x = g[c.offset + k];
        s += double(x) * double(x);
        bad += isfinite(x) ? 0 : 1;
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        bad += __shfl_xor_sync(0xffffffffu, bad, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = s, shb[warp] = bad;
    __syncthreads();
    if (threadIdx.x == 0) {  // fixed order over the warps
        double t = 0;
        long long tb = 0;
        for (int w = 0; w < int(blockDim.x >> 5); ++w) t += sh[w], tb += shb[w];
        partial[blockIdx.x] = t;
        partial_bad[blockIdx.x] = tb;
    }
}

// One block of 1024 threads: thread t sums chunks t, t + 1024, ... in order, then a fixed tree.
__global__ void norm_total_kernel(const double* partial, const long long* partial_bad, int n, GradNormResult* out) {
    __shared__ double sh[1024];
    __shared__ long long shb[1024];
    double s = 0;
    long long b = 0;
    for (int k = threadIdx.x; k < n; k += blockDim.x) s += partial[k], b += partial_bad[k];
    sh[threadIdx.x] = s;
    shb[threadIdx.x] = b;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w], shb[threadIdx.x] += shb[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out->sumsq = sh[0];
        out->norm = sqrt(sh[0]);
        out->nonfinite = shb[0];
        out->pad = 0;
    }
}

__global__ void scale_kernel(const Chunk* __restrict__ chunks, float* __restrict__ g, float f) {
    const Chunk c = chunks[blockIdx.x];
    for (int k = threadIdx.x; k < c.size; k += blockDim.x) g[c.offset + k] *= f;
}

}  // namespace

DeviceAdamW::DeviceAdamW(const AdamWHyper& hyper, int64_t n_total, const std::vector<AdamWSpan>& spans,
                         cudaStream_t stream, int64_t state_begin, int64_t state_end)
    : hyper_(hyper), n_total_(n_total), spans_(spans) {
    HYDRA_CHECK(n_total >= 0, "DeviceAdamW: negative arena size {}", n_total);
    if (state_end < 0) {
        HYDRA_CHECK(state_begin == 0, "DeviceAdamW: state range [{}, end) without an end", state_begin);
        state_end = n_total;
    }
    HYDRA_CHECK(state_begin >= 0 && state_begin <= state_end && state_end <= n_total && state_begin % 16 == 0,
                "DeviceAdamW: state range [{}, {}) is not an aligned range of the arena of {} elements",
                state_begin, state_end, n_total);
    state_begin_ = state_begin, state_end_ = state_end;
    std::vector<Chunk> chunks;
    std::vector<SpanParam> params;
    for (size_t si = 0; si < spans.size(); ++si) {
        const AdamWSpan& s = spans[si];
        HYDRA_CHECK(s.offset >= 0 && s.size >= 0 && s.offset <= n_total && s.size <= n_total - s.offset,
                    "DeviceAdamW: span {} [{}, +{}) lies outside the arena of {} elements", si, s.offset, s.size,
                    n_total);
        params.push_back({s.lr_scale, s.wd_scale, s.mirror ? 1 : 0, 0});
        if (!s.trainable) continue;
        HYDRA_CHECK(s.size == 0 || (s.offset >= state_begin && s.offset + s.size <= state_end),
                    "DeviceAdamW: trainable span {} [{}, +{}) lies outside the state range [{}, {})", si,
                    s.offset, s.size, state_begin, state_end);
        for (int64_t o = 0; o < s.size; o += kChunk)
            chunks.push_back({s.offset + o, int32_t(std::min(kChunk, s.size - o)), int32_t(si)});
    }
    HYDRA_CHECK(chunks.size() < size_t(INT32_MAX), "DeviceAdamW: {} chunks are too many", chunks.size());
    n_chunks_ = int(chunks.size());
    const size_t nc = std::max<size_t>(chunks.size(), 1), np = std::max<size_t>(params.size(), 1);
    CUDA_CHECK(cudaMalloc(&chunks_, nc * sizeof(Chunk)));
    CUDA_CHECK(cudaMalloc(&span_params_, np * sizeof(SpanParam)));
    CUDA_CHECK(cudaMalloc(&partial_, nc * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&partial_bad_, nc * sizeof(long long)));
    CUDA_CHECK(cudaMalloc(&result_, sizeof(GradNormResult)));
    const size_t nbytes = size_t(std::max<int64_t>(state_end - state_begin, 1)) * sizeof(float);
    CUDA_CHECK(cudaMalloc(&m_, nbytes));
    CUDA_CHECK(cudaMalloc(&v_, nbytes));
    if (!chunks.empty())
        CUDA_CHECK(cudaMemcpyAsync(chunks_, chunks.data(), chunks.size() * sizeof(Chunk), cudaMemcpyHostToDevice,
                                   stream));
    if (!params.empty())
        CUDA_CHECK(cudaMemcpyAsync(span_params_, params.data(), params.size() * sizeof(SpanParam),
                                   cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(m_, 0, nbytes, stream));
    CUDA_CHECK(cudaMemsetAsync(v_, 0, nbytes, stream));
    CUDA_CHECK(cudaMemsetAsync(result_, 0, sizeof(GradNormResult), stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors die here
}

DeviceAdamW::~DeviceAdamW() {
    for (void* p : {chunks_, span_params_, static_cast<void*>(partial_), static_cast<void*>(partial_bad_),
                    static_cast<void*>(result_), static_cast<void*>(m_), static_cast<void*>(v_)})
        if (p) cudaFree(p);
}

void DeviceAdamW::step(float* params, bf16* mirror, const float* grads, cudaStream_t stream, float grad_factor,
                       const float* grad_factor_dev) {
    const AdamWHyper& c = hyper_;
    HYDRA_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps >= 0,
                "AdamW: need 0 <= beta1, beta2 < 1 and eps >= 0 (got {}, {}, {})", c.beta1, c.beta2, c.eps);
    ++step_;
    const double bc1 = 1.0 - std::pow(double(c.beta1), double(step_));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(double(c.beta2), double(step_)));
    const float inv_bc2_sqrt = float(1.0 / bc2_sqrt);
    if (n_chunks_ == 0) return;
    adamw_kernel<<<unsigned(n_chunks_), kThreads, 0, stream>>>(
        static_cast<const Chunk*>(chunks_), static_cast<const SpanParam*>(span_params_), params, mirror,
        grads, m_, v_, state_begin_, c.lr, c.weight_decay, c.beta1, c.beta2, c.eps, bc1, inv_bc2_sqrt,
        grad_factor, grad_factor_dev,
        aligned(params, 16) && aligned(grads, 16) && aligned(m_, 16) && aligned(v_, 16) &&
            aligned(mirror, 8));
    CUDA_CHECK(cudaGetLastError());
}

void DeviceAdamW::grad_norm(const float* grads, cudaStream_t stream) {
    if (n_chunks_ == 0) {
        CUDA_CHECK(cudaMemsetAsync(result_, 0, sizeof(GradNormResult), stream));
        return;
    }
    norm_partial_kernel<<<unsigned(n_chunks_), kThreads, 0, stream>>>(static_cast<const Chunk*>(chunks_), grads,
                                                                      partial_, partial_bad_);
    CUDA_CHECK(cudaGetLastError());
    norm_total_kernel<<<1, 1024, 0, stream>>>(partial_, partial_bad_, n_chunks_, result_);
    CUDA_CHECK(cudaGetLastError());
}

GradNormResult DeviceAdamW::read_result(cudaStream_t stream) const {
    GradNormResult r;
    CUDA_CHECK(cudaMemcpyAsync(&r, result_, sizeof(r), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return r;
}

double DeviceAdamW::clip_coefficient(double norm, double max_norm) {
    HYDRA_CHECK(max_norm > 0, "clip_grads: max_norm must be > 0 (got {})", max_norm);
    const double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}

void DeviceAdamW::clip_grads(float* grads, float factor, cudaStream_t stream) {
    if (n_chunks_ == 0 || factor == 1.0f) return;
    scale_kernel<<<unsigned(n_chunks_), kThreads, 0, stream>>>(static_cast<const Chunk*>(chunks_), grads, factor);
    CUDA_CHECK(cudaGetLastError());
}

void DeviceAdamW::set_step_count(int64_t t) {
    HYDRA_CHECK(t >= 0, "AdamW: step counter must be >= 0 (got {})", t);
    step_ = t;
}

void DeviceAdamW::load_state(const float* m_host, const float* v_host, int64_t n, int64_t step) {
    HYDRA_CHECK(
        n == state_size(),
        "AdamW state has {} elements but the parameter arena has {}: the checkpoint belongs to a different "
        "model layout",
        n, state_size());
    set_step_count(step);
    if (n == 0) return;
    CUDA_CHECK(cudaMemcpy(m_, m_host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_, v_host, size_t(n) * sizeof(float), cudaMemcpyHostToDevice));
}

void DeviceAdamW::save_state(float* m_host, float* v_host, cudaStream_t stream) const {
    const int64_t n = state_size();
    if (n == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(m_host, m_, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(v_host, v_, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void zero_grads(float* grads, int64_t n_total, cudaStream_t stream) {
    if (n_total > 0) CUDA_CHECK(cudaMemsetAsync(grads, 0, size_t(n_total) * sizeof(float), stream));
}

}  // namespace hydra::cuda
