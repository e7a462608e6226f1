// Validation of a TokenizerVocab (see tokenizer_vocab.h).
#include "tokenizer/tokenizer_vocab.h"

#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"

namespace hydra {
namespace {

// Printable excerpt of a possibly hostile string for an error message.
std::string excerpt(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 40)) {
        if (c >= 0x20 && c < 0x7F) {
            out += char(c);
        } else {
            out += fmt::format("\\x{:02x}", c);
        }
    }
    if (s.size() > 40) out += "...";
    return out;
}

}  // namespace

void validate_vocab(const TokenizerVocab& v, const std::string& source, const VocabFieldNames& names) {
    HYDRA_CHECK(v.model == "gpt2", "{}: tokenizer model '{}' is not supported (only 'gpt2' byte-level BPE)",
                source, excerpt(v.model));
    (void)pre_tokenizer_from_name(v.pre, source + ": " + names.pre);
    HYDRA_CHECK(!v.tokens.empty(), "{}: {} is empty", source, names.tokens);
    HYDRA_CHECK(v.tokens.size() < size_t(INT32_MAX), "{}: {} has {} entries, too many", source, names.tokens,
                v.tokens.size());
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        const size_t bad = utf8_invalid_offset(v.tokens[i]);
        HYDRA_CHECK(bad == std::string_view::npos, "{}: {}[{}] is not valid UTF-8 (byte {} of '{}')", source,
                    names.tokens, i, bad, excerpt(v.tokens[i]));
        HYDRA_CHECK(!v.tokens[i].empty(), "{}: {}[{}] is an empty string", source, names.tokens, i);
    }
    if (!v.token_types.empty()) {
        HYDRA_CHECK(v.token_types.size() == v.tokens.size(), "{}: {} has {} entries but {} has {}", source,
                    names.token_types, v.token_types.size(), names.tokens, v.tokens.size());
        for (size_t i = 0; i < v.token_types.size(); ++i)
            HYDRA_CHECK(v.token_types[i] >= kTokenUndefined && v.token_types[i] <= kTokenByte,
                        "{}: {}[{}] = {} is not a token type (0..6)", source, names.token_types, i,
                        v.token_types[i]);
    }
    std::unordered_set<std::string_view> known(v.tokens.begin(), v.tokens.end());
    std::string joined;
    for (size_t i = 0; i < v.merges.size(); ++i) {
        const auto& [a, b] = v.merges[i];
        HYDRA_CHECK(!a.empty() && !b.empty(), "{}: {}[{}] = '{} {}' is malformed (expected 'A B')", source,
                    names.merges, i, excerpt(a), excerpt(b));
        HYDRA_CHECK(known.count(a), "{}: {}[{}]: left part '{}' is not in the vocabulary", source,
                    names.merges, i, excerpt(a));
        HYDRA_CHECK(known.count(b), "{}: {}[{}]: right part '{}' is not in the vocabulary", source,
                    names.merges, i, excerpt(b));
        joined.assign(a).append(b);
        HYDRA_CHECK(known.count(joined), "{}: {}[{}]: merged token '{}' is not in the vocabulary", source,
                    names.merges, i, excerpt(joined));
    }
    const int32_t n = int32_t(v.tokens.size());
    const std::pair<int32_t, const std::string*> ids[] = {
        {v.bos_id, &names.bos}, {v.eos_id, &names.eos}, {v.unk_id, &names.unk},
        {v.pad_id, &names.pad}, {v.eot_id, &names.eot},
    };
    for (const auto& [id, name] : ids)
        HYDRA_CHECK(id >= -1 && id < n, "{}: {} = {} is out of range (vocabulary has {} tokens)", source,
                    *name, id, n);
    HYDRA_CHECK(!v.add_bos || v.bos_id >= 0, "{}: add_bos_token is set but there is no BOS token id", source);
    HYDRA_CHECK(!v.add_eos || v.eos_id >= 0, "{}: add_eos_token is set but there is no EOS token id", source);
}

}  // namespace hydra
