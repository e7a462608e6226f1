// Model tokenizer discovery for the eval tasks (see model_text_encoder.h).
#include "eval/model_text_encoder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "model/model_loader.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

void add_stop(std::vector<int32_t>& stops, int32_t id) {
    if (id >= 0 && std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
}

}  // namespace

ModelText model_text_from_vocab(const TokenizerVocab& vocab, const std::string& source) {
    ModelText t;
    auto tok = std::make_shared<const Tokenizer>(vocab, source);
    t.bpe = tok;
    t.encoder = std::make_shared<const BpeEncoder>(*tok);
    t.bos_id = vocab.add_bos ? vocab.bos_id : -1;
    add_stop(t.stop_ids, vocab.eos_id);
    add_stop(t.stop_ids, vocab.eot_id);
    if (auto id = tok->find_token("<|im_start|>")) t.im_start = *id;
    if (auto id = tok->find_token("<|im_end|>")) t.im_end = *id;
    add_stop(t.stop_ids, t.im_end);
    t.chatml = !vocab.chat_template.empty() && is_chatml_template(vocab.chat_template) && t.im_start >= 0 &&
               t.im_end >= 0;
    if (t.chatml) t.default_system = chatml_default_system(vocab.chat_template).value_or("");
    return t;
}

ModelText byte_model_text() {
    ModelText t;
    t.encoder = std::make_shared<const ByteEncoder>();
    t.stop_ids = {ByteTokenizer::kEndOfText, ByteTokenizer::kImEnd};
    t.im_start = ByteTokenizer::kImStart;
    t.im_end = ByteTokenizer::kImEnd;
    return t;  // no chat template: tiny teachers are trained on raw prose
}

ModelText model_text_for(const std::string& model_path, const std::optional<TokenizerVocab>& vocab,
                         const std::vector<int32_t>& extra_stop_ids) {
    ModelText t;
    std::optional<TokenizerVocab> v = vocab;
    if (!v) v = load_vocab(model_path);
    if (v) {
        t = model_text_from_vocab(*v, model_path);
    } else {
        const fs::path cfg = fs::path(model_path) / "config.json";
        std::string tokenizer;
        if (fs::is_directory(model_path) && fs::exists(cfg)) {
            const nlohmann::json j =
                try_parse_json_bounded(read_file_limited(cfg, kMaxConfigBytes, "the model's config.json"))
                    .value_or(nlohmann::json());
            if (j.is_object() && j.contains("hydra") && j["hydra"].is_object() &&
                j["hydra"].contains("tokenizer") && j["hydra"]["tokenizer"].is_string())
                tokenizer = j["hydra"]["tokenizer"].get<std::string>();
        }
        HYDRA_CHECK(
            tokenizer == "byte-v1",
            "{}: no tokenizer found (expected GGUF tokenizer metadata, a tokenizer.json, or config.json "
            "\"hydra\": {{\"tokenizer\": \"byte-v1\"}}{})",
            model_path, tokenizer.empty() ? "" : "; found unsupported tokenizer \"" + tokenizer + "\"");
        t = byte_model_text();
    }
    for (int32_t id : extra_stop_ids) add_stop(t.stop_ids, id);
    return t;
}

}  // namespace hydra
