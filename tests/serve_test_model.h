// A tiny model with a tokenizer for the serving tests: a byte-level vocabulary (the 256 byte tokens, no
// merges) plus <|endoftext|> (EOS), <|im_start|> and <|im_end|> as control tokens and a ChatML chat
// template, and random llama weights over it, teacher or a GDN hybrid made from it.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/hybrid_conversion.h"
#include "model/llama_model.h"
#include "model/plan_builders.h"
#include "tiny_model.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"

namespace hydra::test {

inline constexpr int32_t kTinyEos = 256, kTinyImStart = 257, kTinyImEnd = 258;

inline TokenizerVocab tiny_byte_vocab() {
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_token_string(uint8_t(b)));
    for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) v.tokens.push_back(s);
    v.token_types.assign(v.tokens.size(), kTokenNormal);
    for (int32_t id : {kTinyEos, kTinyImStart, kTinyImEnd}) v.token_types[size_t(id)] = kTokenControl;
    v.eos_id = kTinyEos;
    v.chat_template =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are tiny.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    return v;
}

inline ModelConfig tiny_serve_config() {
    ModelConfig c = tiny_llama_config({.vocab = 259, .hidden = 32, .intermediate = 48, .layers = 3});
    c.max_position_embeddings = 256;
    c.eos_token_ids = {kTinyEos};
    return c;
}

inline std::unique_ptr<LlamaModel> tiny_serve_teacher(uint64_t seed = 7) {
    auto m = std::make_unique<LlamaModel>(tiny_serve_config());
    randomize_params(*m, seed, 0.3f);
    return m;
}

// A 2:1 head-level hybrid (GDN heads in every layer) of the tiny teacher.
inline std::unique_ptr<LlamaModel> tiny_serve_hybrid(const LlamaModel& teacher) {
    PlanRequest r;
    r.select = "random";
    r.ratio = parse_ratio("2:1", "test");
    r.granularity = "head";
    r.fusion = FusionKind::ScaleNorm;
    ConversionOptions o;
    std::mt19937_64 gen(3);
    for (int i = 0; i < 48; ++i) o.calibration_tokens.push_back(int32_t(gen() % 256));
    return convert_to_hybrid(teacher, build_plan(teacher.config(), r), o);
}

}  // namespace hydra::test
