// GPU logits for held-out metrics (see gpu_logits.h).
#include "gpu/gpu_logits.h"

#include <memory>

#include "core/error.h"
#include "gpu/cuda_device.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"

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

}  // namespace hydra::gpu
