// Reads a byte-level BPE vocabulary from GGUF metadata (tokenizer.ggml.* keys, tokenizer.chat_template).
#pragma once

#include "io/gguf.h"
#include "tokenizer/tokenizer_vocab.h"

namespace hydra {

// Throws hydra::Error naming the file and key for a missing/invalid field, and a clear error for
// SentencePiece ("llama") vocabularies, which are not supported.
TokenizerVocab vocab_from_gguf(const GgufFile& gguf);

}  // namespace hydra
