// The CPU logits' bf16 floor (see cpu_logits_floor.h).
#include "cpu_logits_floor.h"

#include <algorithm>

#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "parity.h"

namespace hydra::gputest {

std::vector<float> cpu_all_logits(const LlamaModel& model, const std::vector<int32_t>& prompt) {
    ForwardOptions fp32;
    fp32.quantized_decode = false;
    KVCache cache(model, int64_t(prompt.size()) + 1);
    const Tensor lg = compute_logits(model, forward_hidden(model, prompt, cache, fp32));
    return std::vector<float>(lg.f32(), lg.f32() + lg.numel());
}

LogitsFloor cpu_logits_floor(const LlamaModel& model, const std::vector<int32_t>& prompt) {
    LogitsFloor f;
    f.fp32 = cpu_all_logits(model, prompt);
    LlamaModel rounded(model.config(), &model.plan());
    for (const ArenaEntry& e : model.params().entries()) {
        const Tensor src = model.params().get(e.name);
        Tensor dst = rounded.params().get(e.name);
        const float* s = src.f32();
        float* d = dst.f32();
        const bool matrix = e.shape.size() == 2;  // GEMM weights, the embedding and the LM head
        for (int64_t i = 0; i < src.numel(); ++i) d[i] = matrix ? round_bf16(s[i]) : s[i];
    }
    f.bf16 = cpu_all_logits(rounded, prompt);
    const size_t T = prompt.size(), V = f.fp32.size() / std::max<size_t>(T, 1);
    for (size_t t = 0; t < T; ++t) {
        const RelRms r = rel_rms(f.bf16.data() + t * V, f.fp32.data() + t * V, V);
        if (r.value > f.worst) f.worst = r.value, f.worst_at = int64_t(t);
        if (t + 1 == T) f.last = r.value;
    }
    return f;
}

}  // namespace hydra::gputest
