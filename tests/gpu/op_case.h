// One case of the GPU op table (test_ops.cpp), in the manner of llama.cpp's test-backend-ops: a name that
// states the op and its shape, and a run that draws random inputs, computes the CPU float reference
// (hydra_lib), runs the CUDA op forward and backward, and checks every output (parity.h). The factories
// below build the cases of each op family; their files hold the ops' checks.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>

#include "core/rng.h"

namespace hydra {
enum class FusionKind;
}

namespace hydra::gputest {

struct OpCase {
    std::string name;               // letters, digits and '_' (a gtest parameter name)
    std::function<void(Rng&)> run;  // EXPECT failures for outputs out of tolerance
};
inline void PrintTo(const OpCase& c, std::ostream* os) {
    *os << c.name;
}  // gtest's listing and messages

// "op_B2_T1000_D64": the op and its dimensions, as a case name.
inline std::string case_name(const std::string& op,
                             std::initializer_list<std::pair<const char*, int64_t>> dims) {
    std::string s = op;
    for (const auto& [k, v] : dims) {
        s += '_';
        s += k;
        s += std::to_string(v);
    }
    return s;
}

// ---- GDN and attention (ops_gdn_attention.cpp) ----
// The chunked GDN forward (saving and plain, after another forward on the same workspace) and backward,
// with the in-kernel q/k L2 norm (or, l2norm = false, without it on rows of norm near 1); the backward run
// twice more on the same inputs must give the same bits.
struct GdnChunkShape {
    int B, T, H, HV, D;
    bool l2norm = true;
    // q, k as a model's short convolution hands them over: SiLU of normals around 1 (positive, so the
    // normalised rows cluster around one direction and the chunk's keys are far from orthogonal), not
    // isotropic normals
    bool silu_qk = false;
};
OpCase gdn_chunk_case(const GdnChunkShape& s);
OpCase gdn_decode_case(int B, int H, int HV, int D);
// Causal GQA attention, our kernels: forward, backward, and the forward built for the other register budget;
// the deterministic backward (AttnWorkspace::deterministic) against the same references and, run twice more,
// for the same bits.
OpCase attention_case(int B, int T, int H, int Hkv, int D);
// cuDNN's fused attention against the same references (skipped where cuDNN does not load or support the
// shape); fused_qkv: q|k|v read from and dq|dk|dv written to the training step's one (B T, (H + 2 Hkv) D)
// row; deterministic: the deterministic step's graphs (CudnnAttention(true)), and the backward run twice more
// for the same bits.
OpCase attention_cudnn_case(int B, int T, int H, int Hkv, int D, bool fused_qkv, bool deterministic = false);
// Our attention kernels and the decode kernel with sliding windows W on every other query head, plus sinks.
OpCase attention_window_case(int B, int T, int H, int Hkv, int D, int window, int sinks);

// ---- layer ops (ops_layers.cpp) ----
OpCase embedding_case(int64_t N, int64_t V, int64_t C);
OpCase rmsnorm_case(int64_t N, int64_t C);
OpCase rope_case(int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0);
// RoPE scaling: `spec` as `hydra convert --rope-scaling` takes it, the model's context max_pos.
OpCase rope_scaled_case(const std::string& spec, int64_t max_pos, int64_t num_seqs, int64_t T, int64_t H,
                        int64_t Dh, int64_t pos0);
OpCase swiglu_case(int64_t N, int64_t I);
OpCase short_conv_case(int64_t B, int64_t T, int64_t D, int64_t W, bool with_prev, int64_t pad);
OpCase short_conv_decode_case(int64_t B, int64_t D, int64_t W, int64_t pad);
OpCase gdn_gates_case(int64_t N, int64_t HV, bool neg);
OpCase gated_rmsnorm_case(int64_t N, int64_t HV, int64_t D, int64_t zpad);
OpCase fusion_case(FusionKind kind, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, bool inplace,
                   bool la_bias = false);
OpCase elementwise_case(int64_t N, int64_t F);

// ---- training ops (ops_train.cpp) ----
OpCase gemm_case(int64_t M, int64_t N, int64_t K);
OpCase linear_case(int64_t N, int64_t in, int64_t out);
OpCase cross_entropy_case(int64_t N, int64_t C, int64_t V, int64_t row_block, int64_t vocab_chunk);
OpCase kl_case(int64_t N, int64_t Cs, int64_t Ct, int64_t V, float tau, int64_t seq_len,
               int64_t kl_max_position, int64_t row_block, int64_t vocab_chunk);
OpCase mse_case(int64_t n);
OpCase adamw_case();

}  // namespace hydra::gputest
