// FA -> HydraHead conversion with parameter reuse (methods.md §3-4, stage 0). Given the teacher and
// a HybridPlan, builds the hybrid whose FA heads are the teacher's heads unchanged and whose LA heads
// are Gated DeltaNet heads initialised from the same weights:
//   - q rows of an LA head = the teacher head's q rows; its k and v rows = its KV group's rows (the
//     GQA group is repeated per query head, as fla's conversions do); o_proj columns are kept and
//     permuted with the heads (FA heads first), which is exact.
//   - short convolutions start as the identity (tap W-1 = 1), so at init q/k/v see only the current
//     token, like the teacher's projections.
//   - decay: a_proj = 0 and A_log = 0, dt_bias = softplus^-1(1 / (span_h + 1)), where span_h is the
//     teacher head's mean attention distance on calibration text. A head that attends 200 tokens back
//     starts with a memory of ~200 tokens; a local head forgets fast. fla's random Mamba2 init
//     (decay >= 0.2 per token) would make every head local at init.
//   - b_proj = 0 (beta = 1/2: half-strength delta writes until training decides), o_norm = 1,
//     g_proj ~ N(0, 0.02) as fla (the gate cannot be an identity without a bias; the fusion rescales).
//   - fusion scales = the teacher head's output RMS on calibration text, so fused outputs start at the
//     teacher's scale (hymba: the group's RMS, doubled to undo the average).
//   - with LA offsets (plan.la_bias): an LA head's offset = the teacher head's mean output over the
//     calibration positions after the first, and its scale the RMS about that mean. A softmax head that
//     mostly reads the sink outputs nearly the same vector at every token; a GDN head cannot, and without
//     that component the residual stream of SmolLM2's conversion carries the first token's massive
//     activation at every token from layer 11 on (docs/results/conversion_init).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/hybrid_plan.h"
#include "model/llama_model.h"

namespace hydra {

struct ConversionOptions {
    std::vector<int32_t> calibration_tokens;  // teacher statistics; empty: RMS 1 and span 64 for every head
    uint64_t seed = 1;                        // g_proj init
    // Positions of the hybrid's FA heads (the teacher's statistics are measured with its own RoPE):
    std::optional<RopeScaling>
        rope_scaling;                  // set: replaces the teacher's (apply_rope_scaling: context grows)
    std::optional<double> rope_theta;  // set: replaces the teacher's base (static NTK-aware scaling)
    bool fa_nope = false;              // FA heads without RoPE (needs LA heads to carry order)
};

// The positions option of a conversion from `hydra convert --rope-scaling` / a pipeline variant's
// rope_scaling: "ntk:ALPHA" (static NTK-aware base for rope_theta), TYPE:FACTOR[,key=value...]
// (parse_rope_scaling_spec), or "" (the teacher's own). `where` names the option in errors.
void set_rope_option(ConversionOptions& options, const std::string& spec, const ModelConfig& teacher,
                     const std::string& where);

// What the calibration measured, per teacher layer and head (original head order).
struct ConversionStats {
    std::vector<std::vector<double>> head_rms;   // [L][H] RMS of the head's output (before o_proj)
    std::vector<std::vector<double>> head_span;  // [L][H] mean attention distance in tokens
    // Over the positions after the first (the first token is every sink head's own target, unlike any
    // other): [L][H][Dh] the head output's mean, [L][H] its RMS about that mean (zeros / the RMS when the
    // calibration has one token).
    std::vector<std::vector<std::vector<double>>> head_mean;
    std::vector<std::vector<double>> head_dev_rms;
    int64_t calibration_tokens = 0;
};

// Teacher statistics on `tokens` (one forward pass with taps).
ConversionStats measure_teacher(const LlamaModel& teacher, const std::vector<int32_t>& tokens);

// Builds the hybrid. The teacher must be an all-FA model; the plan must fit its config.
std::unique_ptr<LlamaModel> convert_to_hybrid(const LlamaModel& teacher, const HybridPlan& plan,
                                              const ConversionOptions& options, ConversionStats* stats_out = nullptr);

}  // namespace hydra
