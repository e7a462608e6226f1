// ChatML prompt formatting as in SmolLM2-Instruct's chat template (tokenizer.chat_template):
//   [<|im_start|>system\n{default_system}<|im_end|>\n]   only if the first message is not "system"
//   <|im_start|>{role}\n{content}<|im_end|>\n             for each message
//   <|im_start|>assistant\n                               if add_generation_prompt
// We do not run Jinja; the template text is only inspected to find the default system sentence.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hydra {

struct ChatMessage {
    std::string role, content;
};

// SmolLM2-Instruct's default system message (its chat template's text).
inline constexpr const char* kSmolLM2DefaultSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

std::string apply_chatml_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                  const std::string& default_system = kSmolLM2DefaultSystem);

// The default system message written into a ChatML Jinja template (the text between
// "<|im_start|>system\n" and the next "<|im_end|>"), or nullopt when the template has none.
std::optional<std::string> chatml_default_system(const std::string& jinja_template);

// True when the Jinja template has the ChatML shape apply_chatml_template() reproduces.
bool is_chatml_template(const std::string& jinja_template);

}  // namespace hydra
