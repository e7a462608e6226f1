// CPU training-step memory estimate (see cpu_step_memory.h).
#include "train/cpu_step_memory.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "model/decoder_layer.h"

namespace hydra {

CpuStepMemory estimate_cpu_step_memory(const ModelConfig& config, const HybridPlan& plan, int64_t params,
                                       int64_t teacher_params, int64_t batch, int64_t seq_len,
                                       bool recompute_attention) {
    int64_t per_token = 0;
    for (int64_t l = 0; l < config.num_layers; ++l)
        per_token += layer_saved_values_per_token(config, plan, l, seq_len, recompute_attention);
    // Model level: the residual stream, final norm output, its gradient (x, hidden, dh, dx) and the KL's
    // student and teacher hidden rows with their gradient.
    const int64_t C = config.hidden_size;
    per_token += 4 * C + 1 + (teacher_params > 0 ? 3 * C : 0);
    CpuStepMemory m;
    m.state_bytes = params * 4 * 4 + teacher_params * 4;
    m.activation_bytes = per_token * batch * seq_len * 4;
    return m;
}

std::optional<int64_t> available_memory_bytes(const std::string& meminfo) {
    std::ifstream in(meminfo);
    if (!in) return std::nullopt;
    std::string line;
    int64_t available = -1, swap_free = 0;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string key;
        int64_t kb = 0;
        if (!(fields >> key >> kb)) continue;
        if (key == "MemAvailable:") available = kb * 1024;
        if (key == "SwapFree:") swap_free = kb * 1024;
    }
    if (available < 0) return std::nullopt;
    return available + swap_free;
}

std::string cpu_step_memory_warning(const CpuStepMemory& need, std::optional<int64_t> available,
                                    int64_t batch, int64_t seq_len) {
    // Called once weights, gradients and optimizer state are allocated: only the activations are still to
    // come.
    if (!available || need.activation_bytes <= *available) return "";
    const double gb = 1e9;
    return fmt::format(
        "this CPU training step needs about {:.1f} GB ({:.1f} GB of activations for {} x {} tokens on top of "
        "{:.1f} GB of weights, gradients and optimizer state), and this machine has {:.1f} GB available "
        "beyond "
        "what is loaded: the kernel may kill the run. Lower data.batch_size or data.seq_len (activations "
        "grow "
        "with their product), or train on a GPU (--device cuda)",
        double(need.total()) / gb, double(need.activation_bytes) / gb, batch, seq_len,
        double(need.state_bytes) / gb, double(*available) / gb);
}

}  // namespace hydra
