// `hydra info MODEL`: configuration, parameter count, storage types, tokenizer, plan, and the KV /
// state bytes per token.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_load_report.h"
#ifdef HYDRA_WITH_CUDA
#include "ops/cuda/device_info.h"
#endif

namespace hydra::cli {

void register_info(CLI::App& app) {
    auto* cmd = app.add_subcommand("info", "Show a model's configuration, parameters and cache sizes");
    auto* model_path = new std::string(default_model_path());
    cmd->add_option("MODEL", *model_path, "a .gguf file or a model directory")->capture_default_str();
    cmd->callback([model_path] {
        LoadedModel m = load_model_reported(*model_path, false);
        const ModelConfig& c = m.model->config();
        fmt::print("model        {}\n", c.name);
        fmt::print("source       {} ({})\n", m.source, m.format);
        fmt::print("architecture {}\n", c.architecture);
        fmt::print("parameters   {} ({:.1f}M)\n", m.model->params().parameter_count(),
                   double(m.model->params().parameter_count()) / 1e6);
        fmt::print("layers       {}\nhidden       {}\nffn          {}\n", c.num_layers, c.hidden_size,
                   c.intermediate_size);
        fmt::print("heads        {} query, {} kv (group {}), head_dim {}\n", c.num_heads, c.num_kv_heads,
                   c.group_size(), c.head_dim);
        fmt::print("vocab        {}\nrope_theta   {}\nrms_eps      {}\ncontext      {}\n", c.vocab_size,
                   c.rope_theta, c.rms_norm_eps, c.max_position_embeddings);
        fmt::print("tied lm_head {}\nqkv bias     {}\nqk norm      {}\n", c.tie_word_embeddings, c.attention_bias,
                   c.qk_norm);
        std::string types;
        for (const auto& [name, count] : m.tensor_types) types += fmt::format("{}{}x{}", types.empty() ? "" : ", ", count, name);
        fmt::print("tensor types {}\n", types);
        fmt::print("plan         all {} heads full attention ({} FA / 0 LA)\n", c.num_layers * c.num_heads,
                   c.num_layers * c.num_heads);
        const int64_t kv_elems = 2 * c.num_layers * c.kv_dim();
        fmt::print("KV cache     {} bytes/token fp32, {} bytes/token bf16; recurrent state 0 bytes\n", kv_elems * 4,
                   kv_elems * 2);
        if (m.vocab)
            fmt::print("tokenizer    {} ({}), {} tokens, {} merges, bos {}, eos {}\n", m.vocab->model, m.vocab->pre,
                       m.vocab->tokens.size(), m.vocab->merges.size(), m.vocab->bos_id, m.vocab->eos_id);
        else
            fmt::print("tokenizer    none\n");
#ifdef HYDRA_WITH_CUDA
        fmt::print("cuda         {}", cuda::device_summary());
#else
        fmt::print("cuda         not built (configure with -DHYDRA_CUDA=ON)\n");
#endif
    });
}

}  // namespace hydra::cli
