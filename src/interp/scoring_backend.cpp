// The CPU scoring backend (see scoring_backend.h): the existing CPU primitives of src/interp.
#include "interp/scoring_backend.h"

#include "interp/attribution_patching.h"

namespace hydra {

FaRun<float> CpuScoringBackend::forward(std::span<const int32_t> tokens, bool save_all_positions,
                                        const FaRun<float>* share, std::span<const int32_t> share_tokens) {
    return fa_forward(weights(), tokens, save_all_positions, {}, share, share_tokens);
}

std::vector<float> CpuScoringBackend::sweep(const FaRun<float>& base,
                                            std::span<const PatchedCopy<float>> copies, int64_t max_batch) {
    return last_position_sweep<float>(weights(), base, copies, max_batch);
}

void CpuScoringBackend::answer_mixer(const FaRun<float>& base, int64_t layer, const float* X, int64_t n,
                                     float* heads, int64_t max_batch) {
    answer_position_mixer<float>(weights(), base, layer, X, n, heads, max_batch);
}

std::vector<float> CpuScoringBackend::answer_head_grad(const FaRun<float>& run, const LogitDiff<float>& ld) {
    return answer_position_head_grad(weights(), run, ld);
}

std::vector<std::vector<float>> CpuScoringBackend::all_head_grad(const FaRun<float>& run,
                                                                 const LogitDiff<float>& ld) {
    return all_positions_head_grad(weights(), run, ld);
}

std::unique_ptr<RetrievalDecoder> CpuScoringBackend::decoder() {
    return cpu_retrieval_decoder(model());
}

}  // namespace hydra
