// CudaGraph: one captured and instantiated CUDA graph (RAII over cudaGraph_t + cudaGraphExec_t). capture()
// records what a function enqueues on a stream (stream capture: nothing runs then) and instantiates it;
// launch() replays the whole recording as one submission. Used for single-token decode (gpu_forward.h),
// where hundreds of small kernels and cuBLAS calls per token are otherwise launch-bound.
// Rules for what is recorded: only asynchronous work on `stream` (no allocation, no synchronisation, no
// host reads of device results), and every pointer it uses must stay valid and unmoved while the graph
// exists; values that change between replays must be read from device memory by the kernels.
// Every CUDA call is checked (hydra::Error on failure).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace hydra::gpu {

class CudaGraph {
public:
    CudaGraph() = default;
    ~CudaGraph();
    CudaGraph(CudaGraph&& o) noexcept;
    CudaGraph& operator=(CudaGraph&& o) noexcept;
    CudaGraph(const CudaGraph&) = delete;
    CudaGraph& operator=(const CudaGraph&) = delete;

    // Records record()'s work on `stream` (thread-local capture mode) and instantiates it. When record()
    // throws or the capture fails, the capture is ended (the stream stays usable, nothing ran) and the error
    // is rethrown.
    static CudaGraph capture(cudaStream_t stream, const std::function<void()>& record);

    void launch(cudaStream_t stream) const;
    bool valid() const { return exec_ != nullptr; }
    size_t num_nodes() const;

private:
    void destroy();
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace hydra::gpu
