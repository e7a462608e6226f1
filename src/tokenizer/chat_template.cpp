// ChatML formatting (see chat_template.h).
#include "tokenizer/chat_template.h"

namespace hydra {

std::string apply_chatml_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                  const std::string& default_system) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
        // The template checks messages[0] inside loop.first, so the default appears at most once.
        if (i == 0 && messages[0].role != "system")
            out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
        out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

std::optional<std::string> chatml_default_system(const std::string& t) {
    const std::string open = "<|im_start|>system\n";
    const size_t a = t.find(open);
    if (a == std::string::npos) return std::nullopt;
    const size_t b = t.find("<|im_end|>", a + open.size());
    if (b == std::string::npos) return std::nullopt;
    return t.substr(a + open.size(), b - a - open.size());
}

bool is_chatml_template(const std::string& t) {
    for (const char* part : {"<|im_start|>", "message['role']", "message['content']", "<|im_end|>",
                             "add_generation_prompt", "<|im_start|>assistant\n"})
        if (t.find(part) == std::string::npos) return false;
    return true;
}

}  // namespace hydra
