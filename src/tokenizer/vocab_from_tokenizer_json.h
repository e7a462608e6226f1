// Reads a byte-level BPE vocabulary from a Hugging Face tokenizer.json, plus the optional sibling
// tokenizer_config.json (bos/eos/pad/unk tokens, add_bos_token, add_eos_token, chat_template) and
// chat_template.jinja.
#pragma once

#include <string>

#include "tokenizer/tokenizer_vocab.h"

namespace hydra {

// `path` is the tokenizer.json file. The pre-tokenizer is recognised from its JSON:
//   ByteLevel(use_regex=true)                                   -> "gpt2"
//   Sequence[Digits(individual_digits=true), ByteLevel(...)]    -> "smollm"
//   Sequence[Split(Llama-3 / Qwen2 regex, isolated), ByteLevel(use_regex=false)] -> "llama-bpe" / "qwen2"
// Anything else, a non-BPE model, byte_fallback, an unk token, subword prefixes or a normalizer is
// rejected with an error naming the file and the JSON path.
TokenizerVocab vocab_from_tokenizer_json(const std::string& path);

// Same, from the text of a tokenizer.json; reads no file. `source` names it in errors (its parent
// directory names the tokenizer_config.json in errors about that). `tokenizer_config_text`, when not
// null, is the text of the sibling tokenizer_config.json. chat_template.jinja is not consulted.
TokenizerVocab vocab_from_tokenizer_json_text(const std::string& json_text, const std::string& source,
                                              const std::string* tokenizer_config_text = nullptr);

}  // namespace hydra
