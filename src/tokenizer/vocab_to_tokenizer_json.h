// Writes a byte-level BPE vocabulary as a Hugging Face tokenizer.json and its sibling
// tokenizer_config.json: the inverse of vocab_from_tokenizer_json, so that a model directory
// converted from a GGUF file carries a tokenizer that our loader, HF `tokenizers` and HF
// `transformers` all read with the same ids.
#pragma once

#include <string>

#include "tokenizer/tokenizer_vocab.h"

namespace hydra {

// Text of tokenizer.json (2-space indented, as `tokenizers` saves it):
//   model           BPE, every token in `vocab` at its id, merges as [left, right] pairs, no unk
//                   token, ignore_merges = false (our Tokenizer always merges);
//   added_tokens    control tokens (special = true) and user-defined ones (special = false);
//   pre_tokenizer   gpt2 / smollm / llama-bpe / qwen2 in the JSON form `tokenizers` writes and
//                   vocab_from_tokenizer_json recognises;
//   post_processor  TemplateProcessing adding BOS / EOS as add_bos / add_eos say;
//   decoder         ByteLevel.
// Throws hydra::Error when the vocabulary is invalid (validate_vocab) or cannot be represented:
// two ids with the same spelling (tokenizer.json maps a spelling to one id), or a chat template
// that is not valid UTF-8.
//
// What does not come back through vocab_from_tokenizer_json: token types other than control and
// user-defined come back as normal (undefined, unknown, unused and byte tokens are tokenised and
// decoded as normal ones anyway), an empty token_types comes back as all normal, a pre-tokenizer
// alias ("gpt-2", "llama3") comes back as its canonical name, and eot_id is not written (neither
// file format has a field for it). Everything else round-trips exactly.
std::string vocab_to_tokenizer_json(const TokenizerVocab& vocab);

// Text of tokenizer_config.json: bos/eos/pad/unk tokens by content (null when absent),
// add_bos_token, add_eos_token, chat_template when present, added_tokens_decoder, and
// tokenizer_class "PreTrainedTokenizerFast" so transformers uses tokenizer.json as written.
// Same errors as vocab_to_tokenizer_json.
std::string vocab_to_tokenizer_config_json(const TokenizerVocab& vocab);

}  // namespace hydra
