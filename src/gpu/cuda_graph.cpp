// CUDA graph capture and replay (see cuda_graph.h).
#include "gpu/cuda_graph.h"

#include <utility>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

CudaGraph::~CudaGraph() { destroy(); }

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
    if (this != &o) {
        destroy();
        graph_ = std::exchange(o.graph_, nullptr);
        exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
}

void CudaGraph::destroy() {
    // destructors must not throw: errors here can only come from a context already broken
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
}

CudaGraph CudaGraph::capture(cudaStream_t stream, const std::function<void()>& record) {
    HYDRA_ASSERT(stream != nullptr, "CudaGraph::capture needs a stream of its own (not the legacy default stream)");
    CudaGraph g;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
        record();
    } catch (...) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(stream, &partial);  // ends the capture even when it was invalidated
        if (partial) (void)cudaGraphDestroy(partial);
        (void)cudaGetLastError();  // capture errors are not sticky: clear the last-error slot
        throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &g.graph_));
    // the kernels keep the priorities of the streams they were captured from (without the flag a graph runs
    // every node at its launch stream's priority): the GDN forward's scan runs on a high-priority stream
    // beside its prep (ops/cuda/gdn_chunk.cu)
    CUDA_CHECK(cudaGraphInstantiateWithFlags(&g.exec_, g.graph_, cudaGraphInstantiateFlagUseNodePriority));
    CUDA_CHECK(cudaGraphUpload(g.exec_, stream));  // first replay without the upload cost
    return g;
}

void CudaGraph::launch(cudaStream_t stream) const {
    HYDRA_ASSERT(exec_ != nullptr, "CudaGraph::launch on an empty graph");
    CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

size_t CudaGraph::num_nodes() const {
    if (!graph_) return 0;
    size_t n = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
}

}  // namespace hydra::gpu
