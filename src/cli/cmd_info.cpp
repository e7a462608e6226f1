// `hydra info MODEL`: configuration, parameter count, storage types, tokenizer, plan, and the KV /
// state bytes per token.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_load_report.h"
#include "model/hybrid_plan.h"
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
        fmt::print("rope scaling {}\n", describe_rope_scaling(c.rope_scaling, c.max_position_embeddings));
        if (c.fa_nope) fmt::print("positions    NoPE: the FA heads rotate nothing\n");
        fmt::print("tied lm_head {}\nqkv bias     {}\nqk norm      {}\n", c.tie_word_embeddings, c.attention_bias,
                   c.qk_norm);
        std::string types;
        for (const auto& [name, count] : m.tensor_types) types += fmt::format("{}{}x{}", types.empty() ? "" : ", ", count, name);
        fmt::print("tensor types {}\n", types);
        const HybridPlan& plan = m.model->plan();
        const HybridPlan teacher = HybridPlan::all_fa(c);
        fmt::print("plan         {}", plan.ratio_summary());
        if (!plan.is_all_fa())
            fmt::print(" [{}; {} granularity; fusion {}{}; FA KV groups {} of {}]", plan.selection,
                       plan.granularity, fusion_name(plan.fusion), plan.la_bias ? " with LA offsets" : "",
                       plan.total_fa_kv_groups(c), c.num_layers * c.num_kv_heads);
        fmt::print("\n");
        if (!plan.is_all_fa()) {
            std::string per_layer;
            for (const LayerPlan& lp : plan.layers) per_layer += fmt::format("{}{}", per_layer.empty() ? "" : " ", lp.num_fa());
            fmt::print("FA heads     per layer: {}\n", per_layer);
        }
        // KV bytes grow with the sequence; the GDN state does not. bf16 is what the GPU stores, fp32 the CPU.
        const int64_t kv2 = plan.kv_bytes_per_token(c, 2), kv4 = plan.kv_bytes_per_token(c, 4);
        const int64_t t2 = teacher.kv_bytes_per_token(c, 2);
        fmt::print("KV cache     {} bytes/token bf16 ({} fp32); teacher {} bytes/token bf16 ({:.4f}x)\n", kv2, kv4, t2,
                   double(kv2) / double(t2));
        fmt::print("GDN state    {} bytes per sequence (fp32 recurrent + conv state)\n", plan.state_bytes(c));
        if (plan.has_windows())
            fmt::print(
                "windows      the sliding-window heads' K/V rows are all kept (the cache is not bounded to "
                "window + sinks yet): the figures above count them\n");
        auto mib = [](double b) { return b / (1024.0 * 1024.0); };
        for (int64_t n : {int64_t(4096), int64_t(32768), int64_t(131072)})
            fmt::print("cache @{:>4}K {:>10.2f} MiB per sequence bf16 KV + state (teacher {:.2f} MiB)\n", n / 1024,
                       mib(double(kv2 * n + plan.state_bytes(c))), mib(double(t2 * n)));
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
