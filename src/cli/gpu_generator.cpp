// GPU greedy generator (see gpu_generator.h).
#include "cli/gpu_generator.h"

#include <memory>
#include <span>

#include <fmt/format.h>

#include "core/error.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/cuda_device.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#endif

namespace hydra::cli {

#ifndef HYDRA_WITH_CUDA
constexpr const char* kNoCudaBuild =
    "this hydra was built without CUDA (configure with -DHYDRA_CUDA=ON on a machine with the CUDA toolkit)";
#endif

GenerateFn gpu_generator(const LlamaModel& model, const ModelText& text, int64_t max_positions,
                         int64_t context_limit) {
#ifdef HYDRA_WITH_CUDA
    fmt::print(stderr, "device: {}\n", gpu::require_cuda_device());
    struct State {
        gpu::GpuTrainModel model;  // weights only (no gradients, no fp32 copy of the matrices)
        gpu::GpuForward fwd;
        gpu::GpuCache cache;
        State(const LlamaModel& m, int64_t cap) : model(m, false), fwd(model), cache(model, cap) {}
    };
    auto st = std::make_shared<State>(model, max_positions);
    const ModelConfig cfg = model.config();
    return [st, text, cfg, context_limit](const std::vector<int32_t>& prompt, int64_t max_new,
                                          const std::function<bool(const std::string&)>& done) {
        const int64_t capacity = greedy_capacity(cfg, int64_t(prompt.size()), max_new, context_limit);
        HYDRA_CHECK(capacity <= st->cache.capacity(), "GPU cache of {} positions is too small for {}",
                    st->cache.capacity(), capacity);
        st->cache.reset(st->fwd.stream());
        return greedy_decode(
            text, prompt, max_new, capacity,
            [&](std::span<const int32_t> tokens) { return st->fwd.forward_argmax(st->cache, tokens); }, done);
    };
#else
    (void)model, (void)text, (void)max_positions, (void)context_limit;
    fail("device cuda: {}", kNoCudaBuild);
#endif
}

void require_cuda_build([[maybe_unused]] const char* what) {
#ifndef HYDRA_WITH_CUDA
    fail("{}: {}", what, kNoCudaBuild);
#endif
}

}  // namespace hydra::cli
