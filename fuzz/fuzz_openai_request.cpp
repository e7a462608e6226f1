// libFuzzer target for the request side of `hydra serve`'s OpenAI API (serve/openai_api.h), with the real
// SmolLM2 vocabulary (tests/data/smollm2_tokenizer/tokenizer.json, loaded once). The input is an HTTP body:
// - parse_json_body and parse_completion_request / parse_chat_request may only throw ApiError, with a 4xx
//   status, whose error body is valid JSON (what the server sends back);
// - an accepted request has at least one choice, each with a non-empty prompt of in-vocabulary ids that
//   fits the context with its max_tokens, and sampling parameters in their documented ranges.
// Build and run: tools/fuzz.sh fuzz_openai_request 300   (seeds: fuzz/seeds/openai_request)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/openai_api.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/vocab_from_tokenizer_json.h"

namespace {

std::unique_ptr<hydra::Tokenizer> g_tok;
std::unique_ptr<hydra::serve::ServedModel> g_model;
constexpr int64_t kContext = 2048;

void check_accepted(const hydra::serve::ApiRequest& r) {
    if (r.generations.empty()) __builtin_trap();
    const int64_t vocab = g_tok->vocab_size();
    for (const hydra::serve::GenerationRequest& g : r.generations) {
        if (g.prompt.empty()) __builtin_trap();
        for (int32_t id : g.prompt)
            if (id < 0 || id >= vocab) __builtin_trap();
        if (g.max_tokens < 0 || int64_t(g.prompt.size()) + g.max_tokens > kContext) __builtin_trap();
        if (!(g.sampling.temperature >= 0) || !(g.sampling.top_p > 0 && g.sampling.top_p <= 1))
            __builtin_trap();
        if (g.sampling.top_k < 0) __builtin_trap();
    }
    if (r.echo && r.echo_texts.size() != r.generations.size()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* path = HYDRA_SOURCE_DIR "/tests/data/smollm2_tokenizer/tokenizer.json";
    try {
        g_tok = std::make_unique<hydra::Tokenizer>(hydra::vocab_from_tokenizer_json(path), path);
        g_model = std::make_unique<hydra::serve::ServedModel>(
            hydra::serve::make_served_model("smollm2", *g_tok, kContext, {2}));
    } catch (const hydra::Error& e) {
        std::fprintf(stderr, "fuzz_openai_request: cannot load %s: %s\n", path, e.what());
        std::abort();
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    for (int endpoint = 0; endpoint < 2; ++endpoint) {
        try {
            const nlohmann::json j = hydra::serve::parse_json_body(body);
            const hydra::serve::ApiRequest r = endpoint == 0
                                                   ? hydra::serve::parse_completion_request(j, *g_model)
                                                   : hydra::serve::parse_chat_request(j, *g_model);
            check_accepted(r);
        } catch (const hydra::serve::ApiError& e) {
            if (e.status < 400 || e.status >= 500) __builtin_trap();
            // the body the server answers with must be valid JSON
            const std::string out = hydra::serve::error_body(e);
            if (nlohmann::json::parse(out, nullptr, false).is_discarded()) __builtin_trap();
        }
    }
    return 0;
}
