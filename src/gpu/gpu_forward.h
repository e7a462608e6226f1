// Forward pass of a teacher or hybrid model on the GPU, the mirror of model/llama_forward.cpp with
// bf16 GEMM operands and activations between ops, fp32 residual stream, fp32 norms / softmax
// statistics / gates / GDN state (DESIGN.md §3). Every layer runs gpu/gpu_decoder_layer.h (the layer the
// training step runs) in its cache mode, on a GpuTrainModel (usually weights only, gpu/gpu_train_model.h),
// for T new tokens at positions pos0..:
//   x (T, C) fp32 -> rmsnorm -> xn bf16 -> ONE GEMM over the layer's proj block (model/device_layout.h)
//   -> proj (T, P) bf16
//   FA heads: [q/k head norm] -> RoPE in place -> k, v rows into the cache (bf16)
//             T > 1: gpu/prefill_attention.h over the cache rows [0, pos0 + T) (cuDNN's fused engine, else
//             our flash kernel from position 0 / the decode kernel per row after it); a prompt continued
//             after cached tokens runs in one pass (set_continue_in_one_pass)
//             T = 1: decode attention over the cache (gpu/decode_attention.h)
//   LA heads: short conv + SiLU on q/k/v (carried windows) -> gates g, beta -> GDN chunked forward with
//             h0/ht = the cached state (T > 1) or the decode step (T = 1) -> gated RMSNorm with z
//   heads (T, H, Dh) bf16 = [FA | LA] -> fusion (mixed layers) -> o_proj GEMM accumulated into x
//   -> rmsnorm -> fused gate_up GEMM -> SwiGLU -> down GEMM accumulated into x
// then the final RMSNorm and the LM head (fp32 logits) for the rows asked for.
//
// Single-token steps (T = 1) replay CUDA graphs (gpu/cuda_graph.h) unless HYDRA_CUDA_GRAPHS=0 or
// set_cuda_graphs(false): the whole step (embedding, every layer, final norm, LM head, and for
// forward_argmax the argmax and its 4-byte copy to the host) is captured once and replayed for every
// later token, one submission instead of hundreds of launches. What changes between steps (token id,
// position, attention length) is written into device memory by one tiny kernel before each replay
// (gpu/decode_step.h); the position-dependent kernels have forms that read it there (RoPE, the cache-row
// write, decode attention with a grid sized for a power-of-two number of key splits, one graph per such
// size: gpu/decode_graph_policy.h). The graphs work in their own fixed decode buffers, so prefill growth
// never moves what they point to; they are dropped when a step runs on another GpuCache. Same kernels and
// same cuBLAS calls as the eager path, so the logits are identical to it (tests/gpu/test_forward.cpp checks).
//
// One GpuForward owns a stream, a cuBLAS context (with its own workspace, so cuBLAS allocates nothing
// during capture) and grow-only activation buffers; it is not thread-safe. Results are copied to the host
// synchronously; everything else is asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gpu/cuda_graph.h"
#include "gpu/decode_step.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_decoder_layer.h"
#include "gpu/gpu_train_model.h"
#include "gpu/prefill_attention.h"
#include "gpu/step_profiler.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gemm.h"

namespace hydra::gpu {

class GpuForward {
  public:
    explicit GpuForward(const GpuTrainModel& model);
    ~GpuForward();
    GpuForward(const GpuForward&) = delete;
    GpuForward& operator=(const GpuForward&) = delete;

    // tokens (T) at positions cache.pos().. appended to the cache. Returns the logits (V) of the last
    // position (gpu_forward_last_logits), of every position (T, V) row-major, or only the argmax of the
    // last position (greedy decoding: 4 bytes back from the device).
    std::vector<float> forward_last_logits(GpuCache& cache, std::span<const int32_t> tokens);
    std::vector<float> forward_all_logits(GpuCache& cache, std::span<const int32_t> tokens);
    int32_t forward_argmax(GpuCache& cache, std::span<const int32_t> tokens);
    // The logits (T, V) of every position left on the device (valid until the next call on this object,
    // ordered on stream()), for statistics computed there (gpu/window_stats.h). A prefill from position 0,
    // or one token.
    const float* forward_all_logits_device(GpuCache& cache, std::span<const int32_t> tokens);

    cudaStream_t stream() const { return stream_; }
    const GpuTrainModel& model() const { return model_; }
    // The prefill attention every layer runs for T > 1 (its backend can be switched: benchmarks, tests).
    PrefillAttention& prefill_attention() { return prefill_; }

    // CUDA graphs for single-token steps: on by default unless HYDRA_CUDA_GRAPHS is 0/off/false/no; off
    // = the eager path (one launch per kernel), the reference the graphs are checked against.
    void set_cuda_graphs(bool on) { graphs_on_ = on; }
    bool cuda_graphs() const { return graphs_on_; }
    // A prompt continued after cached tokens on a model with LA heads: in one multi-token pass (the
    // short convolutions start from the cached windows, the GDN chunked forward from the cached state),
    // or as single-token steps (CUDA-graph replays; slower). One pass unless HYDRA_GPU_CONTINUE=steps;
    // GpuForwardChunks checks both against a one-pass prefill.
    void set_continue_in_one_pass(bool on) { continue_in_one_pass_ = on; }
    bool continue_in_one_pass() const { return continue_in_one_pass_; }
    struct GraphStats {
        int64_t captures = 0;        // graphs recorded (one per decode-attention grid size and output kind)
        int64_t replays = 0;         // single-token steps served by a graph
        int64_t fallbacks = 0;       // captures that failed (graphs then switched off, eager from there on)
        double capture_seconds = 0;  // host time spent capturing + instantiating
        size_t last_nodes = 0;       // nodes of the last graph captured
    };
    const GraphStats& graph_stats() const { return stats_; }
    // GPU milliseconds per section of the layer (gpu/step_profiler.h: attention, gdn, gemm_fwd, ...) of
    // the eager passes between enable_profile() and collect_profile() (which synchronises and switches the
    // events off again); events cost a few microseconds of CPU each, so benchmarks profile a pass of their
    // own, and graph captures must not run in between.
    void enable_profile() { prof_.enable(stream_); }
    std::map<std::string, double> collect_profile() {
        prof_.stop();
        std::map<std::string, double> ms = prof_.collect();
        prof_.disable();
        return ms;
    }

  private:
    // Device buffers one forward pass works in: the eager path's grow-only members, or the decode graphs'
    // fixed single-token set (then step / max_splits are set and T = 1).
    struct Work {
        int32_t* ids = nullptr;
        float *x = nullptr, *gates = nullptr, *rope = nullptr, *partials = nullptr, *logits = nullptr;
        bf16 *xn = nullptr, *proj = nullptr, *attn = nullptr;
        bf16 *la_qkv = nullptr, *la_o = nullptr, *heads = nullptr, *gu = nullptr, *act = nullptr;
        const DecodeStep* step = nullptr;  // graph decode: position and attention length read on the device
        int64_t max_splits = 0;            // graph decode: key splits per head of the attention grid
    };
    // The graphs' own buffers (T = 1), allocated once; partials sized for the cache they were made for.
    struct DecodeSet {
        cuda::DeviceBuffer<int32_t> ids, argmax;
        cuda::DeviceBuffer<DecodeStep> step;
        cuda::DeviceBuffer<float> x, gates, partials, logits;
        cuda::DeviceBuffer<bf16> xn, proj, attn, la_qkv, la_o, heads, gu, act;
    };

    // Checks tokens and room in the cache (hydra::Error naming the problem).
    void check_tokens(const GpuCache& cache, std::span<const int32_t> tokens) const;
    // Runs tokens and returns the device logits of the last n_logits positions (n_logits, V): a graph
    // replay for a single token when graphs are on, else the eager path.
    const float* run(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits);
    bool has_la_heads() const;
    void run_segment(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits);
    // One single-token step through a graph (captured on first use); with `argmax` the graph also leaves
    // the greedy token in host_token_. Returns the device logits (V), or null when the capture failed
    // (graphs are then off and the caller runs the eager path).
    const float* graph_step(GpuCache& cache, int32_t token, bool argmax);
    void prepare_graphs(const GpuCache& cache);
    void drop_graphs();
    // embedding -> layers -> final norm -> LM head of T tokens at pos0 (unused by graph decode: w.step).
    void forward_pass(GpuCache& cache, int64_t T, int64_t pos0, int64_t n_logits, const Work& w);
    void layer(int64_t l, GpuCache& cache, int64_t T, int64_t pos0, const Work& w);
    Work eager_work();
    void ensure(int64_t T, int64_t n_logits, int64_t kv_len);
    cuda::GdnWorkspace& gdn_workspace(int64_t T, int64_t n_la);

    // The layer's resources in the cache mode: no training attention (prefill runs prefill_), no backward,
    // GDN chunk workspaces per (T, n_la).
    struct LayerResources final : GpuLayerResources {
        GpuForward* fwd = nullptr;
        cuda::CudnnAttention* cudnn_attention(const cuda::AttnShape& as) override;
        cuda::AttnWorkspace& attn_workspace(int64_t n_fa, int64_t n_kv, const GpuLayerShape& s) override;
        cuda::GdnWorkspace& gdn_workspace(int64_t l, int64_t n_la, const GpuLayerShape& s,
                                          bool save) override;
    };

    const GpuTrainModel& model_;
    cuda::RopeFreqs rope_freqs_;            // the model's RoPE frequencies (gpu/gpu_rope.h)
    std::vector<GpuLayerWeights> weights_;  // per layer, views of model_ (inference_weights)
    LayerResources res_;
    PrefillAttention prefill_;
    StepProfiler prof_;  // off (the layer's section marks cost nothing) unless enable_profile()
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<cuda::BlasContext> blas_;
    int64_t cap_T_ = 0, cap_logits_ = 0, cap_kv_ = 0;
    cuda::DeviceBuffer<int32_t> ids_, argmax_;
    cuda::DeviceBuffer<float> continued_logits_;  // run(): a continued prompt's last rows, stepped
    bool continue_in_one_pass_ = true;
    cuda::DeviceBuffer<float> x_, gates_, rope_, partials_, logits_;
    cuda::DeviceBuffer<bf16> xn_, proj_, attn_, la_qkv_, la_o_, heads_, gu_, act_;
    int32_t* host_token_ = nullptr;                                                      // pinned
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<cuda::GdnWorkspace>> gdn_ws_;  // (T, n_la)

    bool graphs_on_ = true;
    GraphStats stats_;
    DecodeSet dec_;
    uint64_t graph_cache_id_ = 0;                           // GpuCache::id the graphs point into (0: none)
    std::map<std::pair<int64_t, bool>, CudaGraph> graphs_;  // (attention splits, argmax) -> graph
};

}  // namespace hydra::gpu
