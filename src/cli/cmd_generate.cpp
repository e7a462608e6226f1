// `hydra generate MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--chat]`:
// streams a continuation (or, with --chat, an assistant answer through the model's chat template).
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_load_report.h"
#include "core/error.h"
#include "serve/generator.h"
#include "tokenizer/chat_template.h"

namespace hydra::cli {

namespace {
struct GenerateOptions {
    std::string model = default_model_path();
    std::string prompt;
    std::string system;
    int64_t n = 64;
    float temp = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    uint64_t seed = 0;
    bool chat = false;
    bool stats = false;
    int threads = 0;
    std::string quantize_weights = "none";
};
}  // namespace

void register_generate(CLI::App& app) {
    auto* o = new GenerateOptions;
    auto* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams tokens)");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory")->capture_default_str();
    cmd->add_option("-p,--prompt", o->prompt, "the prompt text")->required();
    cmd->add_option("-n,--n-predict", o->n, "maximum number of new tokens")->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
    cmd->add_option("--temp", o->temp, "sampling temperature; 0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd->add_option("--top-p", o->top_p, "nucleus sampling mass in (0, 1]")->capture_default_str();
    cmd->add_option("--seed", o->seed, "random seed for sampling")->capture_default_str();
    cmd->add_flag("--chat", o->chat, "wrap the prompt as a user turn of the model's chat template");
    cmd->add_option("--system", o->system, "system message for --chat (default: the template's own)");
    cmd->add_flag("--stats", o->stats, "print prefill/decode speed on stderr at the end");
    add_threads_option(*cmd, o->threads);
    add_weight_quantization_option(*cmd, o->quantize_weights);
    cmd->callback([o] {
        apply_threads(o->threads);
        SamplerConfig sc{o->temp, o->top_k, o->top_p, o->seed};
        Sampler sampler(sc);  // validates the options before the (slower) model load
        LoadedModel m = load_model_reported(o->model);
        apply_weight_quantization(*m.model, o->quantize_weights);
        HYDRA_CHECK(m.vocab.has_value(), "{}: the model has no tokenizer", o->model);
        Tokenizer tok(*m.vocab, o->model);
        std::vector<int32_t> prompt;
        std::vector<int32_t> stops = m.model->config().eos_token_ids;
        if (tok.eos_id() >= 0) stops.push_back(tok.eos_id());
        if (o->chat) {
            const std::string& tmpl = m.vocab->chat_template;
            HYDRA_CHECK(tmpl.empty() || is_chatml_template(tmpl),
                        "{}: --chat supports ChatML templates only, and this model's template is not ChatML",
                        o->model);
            std::vector<ChatMessage> messages;
            std::string system = o->system;
            if (system.empty()) system = chatml_default_system(tmpl).value_or("");
            if (!system.empty()) messages.push_back({"system", system});
            messages.push_back({"user", o->prompt});
            prompt = tok.encode(apply_chatml_template(messages, true, ""), true);
            if (auto im_end = tok.find_token("<|im_end|>")) stops.push_back(*im_end);
        } else {
            prompt = tok.encode_with_bos(o->prompt);
        }
        if (!o->chat) {
            fmt::print("{}", o->prompt);
            std::fflush(stdout);
        }
        GenerationResult r = generate(*m.model, tok, prompt, o->n, sampler, stops, [](std::string_view text) {
            fmt::print("{}", text);
            std::fflush(stdout);
        });
        fmt::print("\n");
        if (o->stats)
            fmt::print(stderr, "prompt {} tokens in {:.3f} s ({:.1f} tok/s); generated {} tokens in {:.3f} s ({:.1f} tok/s); stop: {}\n",
                       r.prompt_tokens, r.prefill_seconds, double(r.prompt_tokens) / r.prefill_seconds,
                       r.tokens.size(), r.decode_seconds,
                       r.decode_seconds > 0 ? double(r.tokens.size()) / r.decode_seconds : 0.0, r.stop_reason);
    });
}

}  // namespace hydra::cli
