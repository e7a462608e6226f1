// ModelText: a loaded model's tokenizer as the task generators and the eval runner need it: a
// TextEncoder (the model's BPE, or bytes for `hydra train` checkpoints whose config.json says
// "hydra": {"tokenizer": "byte-v1"}), the BOS to prepend (only when the vocabulary says add_bos),
// the ids that end generation, the ChatML special ids and the chat template's default system message.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer_vocab.h"
#include "train/byte_tokenizer.h"

namespace hydra {

class Tokenizer;

struct ModelText {
    std::shared_ptr<const Tokenizer> bpe;  // owns what `encoder` reads (null for bytes)
    std::shared_ptr<const TextEncoder> encoder;
    int32_t bos_id = -1;                 // prepended to every prompt; -1 = none
    std::vector<int32_t> stop_ids;       // eos, <|im_end|>, config eos ids (deduplicated)
    int32_t im_start = -1, im_end = -1;  // ChatML specials (-1 when the vocabulary has none)
    bool chatml = false;                 // the model has a ChatML chat template
    std::string default_system;          // its default system message ("" = none)
    std::string name() const { return encoder->name(); }
    // Token bytes of one id, for streaming/decoding single tokens.
    std::string decode(const std::vector<int32_t>& ids) const { return encoder->decode(ids); }
};

// From a vocabulary (GGUF / tokenizer.json).
ModelText model_text_from_vocab(const TokenizerVocab& vocab, const std::string& source);
// The byte tokenizer of tiny CPU teachers (no BOS, stops at <|endoftext|> and <|im_end|>).
ModelText byte_model_text();
// For MODEL: its vocabulary when it has one, else config.json "hydra.tokenizer" == "byte-v1" -> bytes;
// otherwise hydra::Error naming the path and what was looked for. `vocab` may pass an already
// loaded vocabulary (LoadedModel::vocab) to avoid reading it twice. `extra_stop_ids`: the model
// config's eos ids.
ModelText model_text_for(const std::string& model_path,
                         const std::optional<TokenizerVocab>& vocab = std::nullopt,
                         const std::vector<int32_t>& extra_stop_ids = {});

}  // namespace hydra
