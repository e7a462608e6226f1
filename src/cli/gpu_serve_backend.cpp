// GPU serving backend factory (see gpu_serve_backend.h).
#include "cli/gpu_serve_backend.h"

#include "core/error.h"

#ifdef HYDRA_WITH_CUDA
#include "gpu/gpu_batch_backend.h"
#include "gpu/gpu_train_model.h"
#endif

namespace hydra::cli {

#ifdef HYDRA_WITH_CUDA
std::unique_ptr<serve::BatchBackend> make_gpu_batch_backend(const LlamaModel& model,
                                                            const GpuServeOptions& options) {
    gpu::GpuBatchOptions o;
    o.max_slots = options.max_slots;
    o.context = options.context;
    o.cache_bytes = options.cache_bytes;
    // the weights go to the device once; the backend owns that copy (the LlamaModel stays the caller's)
    return std::make_unique<gpu::GpuBatchBackend>(std::make_unique<gpu::GpuTrainModel>(model, false), o);
}
#else
std::unique_ptr<serve::BatchBackend> make_gpu_batch_backend(const LlamaModel&, const GpuServeOptions&) {
    HYDRA_CHECK(false,
                "hydra serve --device cuda: this hydra was built without CUDA (configure with "
                "-DHYDRA_CUDA=ON on a machine with the CUDA toolkit)");
    return nullptr;
}
#endif

}  // namespace hydra::cli
