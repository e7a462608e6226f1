// GGUF tokenizer metadata -> TokenizerVocab (keys: research/engines.md §2.8, ruler.md §5.1).
#include "tokenizer/vocab_from_gguf.h"

#include "core/error.h"

namespace hydra {
namespace {

int32_t id_or_none(const GgufFile& g, const std::string& key) {
    const auto v = g.get_int_opt(key);
    if (!v) return -1;
    HYDRA_CHECK(*v >= 0 && *v < INT32_MAX, "{}: {} = {} is out of range", g.source(), key, *v);
    return int32_t(*v);
}

}  // namespace

TokenizerVocab vocab_from_gguf(const GgufFile& g) {
    const std::string& src = g.source();
    TokenizerVocab v;
    v.model = g.get_string("tokenizer.ggml.model");
    HYDRA_CHECK(
        v.model != "llama",
        "{}: tokenizer.ggml.model is 'llama' (SentencePiece); only 'gpt2' byte-level BPE is supported", src);
    HYDRA_CHECK(v.model == "gpt2",
                "{}: tokenizer.ggml.model '{}' is not supported (only 'gpt2' byte-level BPE)", src, v.model);
    // llama.cpp treats a missing pre-tokenizer as its GPT-2-like default.
    v.pre = g.get_string_opt("tokenizer.ggml.pre").value_or("gpt2");
    v.tokens = g.get_string_array("tokenizer.ggml.tokens");
    if (g.has("tokenizer.ggml.token_type")) {
        const auto types = g.get_int_array("tokenizer.ggml.token_type");
        v.token_types.reserve(types.size());
        for (size_t i = 0; i < types.size(); ++i) {
            HYDRA_CHECK(types[i] >= 0 && types[i] <= 6,
                        "{}: tokenizer.ggml.token_type[{}] = {} is not a token type", src, i, types[i]);
            v.token_types.push_back(int32_t(types[i]));
        }
    }
    if (g.has("tokenizer.ggml.merges")) {
        const auto merges = g.get_string_array("tokenizer.ggml.merges");
        v.merges.reserve(merges.size());
        for (size_t i = 0; i < merges.size(); ++i) {
            const std::string& m = merges[i];
            // Split at the first space from position 1, as llama.cpp does, so a left part that is
            // itself a space-like character still parses.
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            HYDRA_CHECK(sp != std::string::npos && sp + 1 < m.size(),
                        "{}: tokenizer.ggml.merges[{}] = '{}' is malformed (expected 'A B')", src, i,
                        m.substr(0, 60));
            v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
        }
    }
    v.bos_id = id_or_none(g, "tokenizer.ggml.bos_token_id");
    v.eos_id = id_or_none(g, "tokenizer.ggml.eos_token_id");
    v.unk_id = id_or_none(g, "tokenizer.ggml.unknown_token_id");
    v.pad_id = id_or_none(g, "tokenizer.ggml.padding_token_id");
    v.eot_id = id_or_none(g, "tokenizer.ggml.eot_token_id");
    v.add_bos = g.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(false);
    v.add_eos = g.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(false);
    v.chat_template = g.get_string_opt("tokenizer.chat_template").value_or("");
    validate_vocab(v, src);
    return v;
}

}  // namespace hydra
