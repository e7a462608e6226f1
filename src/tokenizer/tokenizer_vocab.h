// TokenizerVocab: everything a byte-level BPE tokenizer needs, as read from a GGUF file or an HF
// tokenizer.json (+ tokenizer_config.json). Loaders fill it and call validate_vocab() so the
// Tokenizer can trust it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hydra {

// GGUF token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
    kTokenUndefined = 0,
    kTokenNormal = 1,
    kTokenUnknown = 2,
    kTokenControl = 3,      // special: <|im_start|> ...; split out of text when parse_special
    kTokenUserDefined = 4,  // added, not special: always split out of text
    kTokenUnused = 5,
    kTokenByte = 6,
};

struct TokenizerVocab {
    std::string model;  // "gpt2" (byte-level BPE) is the only one supported
    std::string pre;    // "smollm", "gpt2", "llama-bpe", "qwen2"
    // Token strings indexed by id. Normal tokens are spelled in the GPT-2 byte alphabet ("Ġthe");
    // control / user-defined tokens are their literal text ("<|im_start|>").
    std::vector<std::string> tokens;
    std::vector<int32_t> token_types;  // empty = all normal; else one TokenType per token
    // Merges, rank = index: (left, right) in the byte alphabet; left + right is a token.
    std::vector<std::pair<std::string, std::string>> merges;
    int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
    bool add_bos = false, add_eos = false;
    std::string chat_template;  // Jinja source, "" when absent
};

// Names used in error messages, so they point at the field of the file the vocab came from.
struct VocabFieldNames {
    std::string tokens = "tokenizer.ggml.tokens";
    std::string token_types = "tokenizer.ggml.token_type";
    std::string merges = "tokenizer.ggml.merges";
    std::string bos = "tokenizer.ggml.bos_token_id";
    std::string eos = "tokenizer.ggml.eos_token_id";
    std::string unk = "tokenizer.ggml.unknown_token_id";
    std::string pad = "tokenizer.ggml.padding_token_id";
    std::string eot = "tokenizer.ggml.eot_token_id";
    std::string pre = "tokenizer.ggml.pre";
};

// Checks every invariant the Tokenizer relies on; throws hydra::Error naming `source`, the field and
// the index: non-empty vocabulary, valid UTF-8 token strings, token_types length and values, every
// merge's parts and their concatenation in the vocabulary, special ids in range, known pre-tokenizer.
void validate_vocab(const TokenizerVocab& vocab, const std::string& source,
                    const VocabFieldNames& names = VocabFieldNames{});

}  // namespace hydra
