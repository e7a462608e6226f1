// The GPU BatchBackend of `hydra serve --device cuda` (gpu/gpu_batch_backend.h) behind a plain factory,
// so that the CLI compiles the same with and without CUDA; without it the factory throws a clear error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "model/llama_model.h"
#include "serve/batch_backend.h"

namespace hydra::cli {

struct GpuServeOptions {
    int64_t max_slots = 64;   // sequences held at once
    int64_t context = 8192;   // positions per sequence
    size_t cache_bytes = 0;   // FA KV blocks + GDN state slots; 0 = most of the free device memory
};

// `model` must outlive the backend.
std::unique_ptr<serve::BatchBackend> make_gpu_batch_backend(const LlamaModel& model, const GpuServeOptions& options);

}  // namespace hydra::cli
