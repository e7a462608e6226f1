// GPU serving backend factory (see gpu_serve_backend.h).
#include "cli/gpu_serve_backend.h"

#include "core/error.h"

namespace hydra::cli {

std::unique_ptr<serve::BatchBackend> make_gpu_batch_backend(const LlamaModel&, const GpuServeOptions&) {
#ifdef HYDRA_WITH_CUDA
    HYDRA_CHECK(false, "hydra serve --device cuda: the GPU batch backend is not in this build yet");
#else
    HYDRA_CHECK(false, "hydra serve --device cuda: this hydra was built without CUDA (configure with "
                       "-DHYDRA_CUDA=ON on a machine with the CUDA toolkit)");
#endif
    return nullptr;
}

}  // namespace hydra::cli
