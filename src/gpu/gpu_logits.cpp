// GPU logits for held-out metrics (see gpu_logits.h).
#include "gpu/gpu_logits.h"

#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "gpu/cuda_device.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu/window_stats.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

LogitsFn make_gpu_logits_fn(const LlamaModel& model, int64_t max_positions) {
    require_cuda_device();
    struct State {
        GpuTrainModel model;  // weights only
        GpuForward fwd;
        GpuCache cache;
        State(const LlamaModel& m, int64_t cap) : model(m, false), fwd(model), cache(model, cap) {}
    };
    auto st = std::make_shared<State>(model, max_positions);
    return [st](std::span<const int32_t> tokens) {
        HYDRA_CHECK(int64_t(tokens.size()) <= st->cache.capacity(),
                    "held-out window of {} tokens exceeds the GPU cache of {} positions", tokens.size(),
                    st->cache.capacity());
        st->cache.reset(st->fwd.stream());
        return st->fwd.forward_all_logits(st->cache, tokens);  // (T, V): prefill from position 0
    };
}

namespace {

// One model resident for the statistics: weights, forward, cache.
struct Resident {
    GpuTrainModel model;  // weights only
    GpuForward fwd;
    GpuCache cache;
    Resident(const LlamaModel& m, int64_t cap) : model(m, false), fwd(model), cache(model, cap) {}
    // The window's logits (n, V) on the device, ordered on `stream`.
    const float* logits(std::span<const int32_t> in, cudaStream_t stream) {
        cache.reset(fwd.stream());
        const float* lg = fwd.forward_all_logits_device(cache, in);
        if (stream != fwd.stream()) {  // the next reader waits for this forward
            cudaEvent_t done;
            CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventRecord(done, fwd.stream()));
            CUDA_CHECK(cudaStreamWaitEvent(stream, done, 0));
            CUDA_CHECK(cudaEventDestroy(done));
        }
        return lg;
    }
};

}  // namespace

WindowStatsFn make_gpu_window_stats_fn(const LlamaModel& teacher, const LlamaModel* student,
                                       int64_t max_positions) {
    require_cuda_device();
    HYDRA_CHECK(student == nullptr || student->config().vocab_size == teacher.config().vocab_size,
                "held-out metrics: the student's vocabulary ({}) is not the teacher's ({})",
                student ? student->config().vocab_size : 0, teacher.config().vocab_size);
    struct State {
        Resident t;
        std::optional<Resident> s;
        cuda::DeviceBuffer<int32_t> next;
        cuda::DeviceBuffer<double> rows;
        std::vector<double> host;
        State(const LlamaModel& tm, const LlamaModel* sm, int64_t cap)
            : t(tm, cap), next(size_t(cap)), rows(size_t(cap) * 4) {
            if (sm) s.emplace(*sm, cap);
        }
    };
    auto st = std::make_shared<State>(teacher, student, max_positions);
    const int64_t V = teacher.config().vocab_size;
    return [st, V](std::span<const int32_t> w) {
        const int64_t n = int64_t(w.size()) - 1;
        HYDRA_CHECK(n >= 1, "a held-out window needs at least 2 tokens");
        HYDRA_CHECK(n <= st->t.cache.capacity(),
                    "held-out window of {} tokens exceeds the GPU cache of {} positions", n,
                    st->t.cache.capacity());
        for (int64_t i = 1; i <= n; ++i)
            HYDRA_CHECK(w[size_t(i)] >= 0 && w[size_t(i)] < V,
                        "held-out token {} outside the vocabulary of {}", w[size_t(i)], V);
        cudaStream_t stream = st->t.fwd.stream();
        const std::span<const int32_t> in = w.first(size_t(n));
        const float* lt = st->t.logits(in, stream);
        const float* ls = st->s ? st->s->logits(in, stream) : lt;
        CUDA_CHECK(cudaMemcpyAsync(st->next.data(), w.data() + 1, size_t(n) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream));
        window_stats_rows(st->rows.data(), lt, ls, st->next.data(), n, V, stream);
        st->host.resize(size_t(n) * 4);
        CUDA_CHECK(cudaMemcpyAsync(st->host.data(), st->rows.data(), size_t(n) * 4 * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        // The student's forward ran on its own stream; its result was waited for before the kernel.
        WindowStats r;
        r.tokens = n;
        for (int64_t t = 0; t < n; ++t) {  // summed in position order, as window_stats does
            r.kl += st->host[size_t(t * 4)];
            r.agree += st->host[size_t(t * 4 + 1)];
            r.nll_student += st->host[size_t(t * 4 + 2)];
            r.nll_teacher += st->host[size_t(t * 4 + 3)];
        }
        return r;
    };
}

}  // namespace hydra::gpu
