// The OpenAI-compatible API of `hydra serve`, without any HTTP: request bodies of /v1/completions and
// /v1/chat/completions are parsed and validated into GenerationRequests (one per choice), and the
// scheduler's GenerationEvents are turned into response objects, streaming chunks and error bodies in
// OpenAI's shapes. Every invalid field is an ApiError naming it (status 4xx), so that a client sees what
// it got wrong and the server never fails on bad input.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/generation_request.h"

namespace hydra {
class Tokenizer;
}

namespace hydra::serve {

// A request the API refuses: HTTP status, message, the offending field ("" when none) and OpenAI's
// error type ("invalid_request_error", "authentication_error", ...; derived from the status when empty).
struct ApiError : std::runtime_error {
    ApiError(int status, const std::string& message, std::string param = "", std::string type = "",
             std::string code = "");
    int status;
    std::string param, type, code;
};

// {"error": {"message", "type", "param", "code"}} (param / code null when empty).
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "",
                          const std::string& type = "", const std::string& code = "");
std::string error_body(const ApiError& e);

// What the API needs to know about the model it serves.
struct ServedModel {
    std::string name;  // the "model" a request may name; the only one accepted
    const Tokenizer* tokenizer = nullptr;
    int64_t context = 0;              // positions one sequence may hold (prompt + completion)
    std::vector<int32_t> eos_ids;     // end-of-sequence ids (generation stops there unless ignore_eos)
    bool chatml = false;              // the chat template is ChatML (apply_chatml_template reproduces it)
    std::string chat_template_error;  // why /v1/chat/completions is refused when !chatml
    std::string default_system;       // the template's default system message ("" = none)
    std::optional<int32_t> im_end;    // <|im_end|>: ends an assistant turn
};

// ServedModel from a tokenizer (its vocabulary's chat template) and the model's end ids.
ServedModel make_served_model(std::string name, const Tokenizer& tokenizer, int64_t context,
                              std::vector<int32_t> eos_ids);

enum class Endpoint { Completions, ChatCompletions };

// A validated request: one GenerationRequest per choice (several prompts = several choices).
struct ApiRequest {
    Endpoint endpoint = Endpoint::Completions;
    std::vector<GenerationRequest> generations;
    std::vector<std::string> echo_texts;  // completions with echo: each prompt's text, else empty
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool echo = false;
    int logprobs = -1;  // -1 off; completions: logprobs; chat: top_logprobs when logprobs is true
};

// The JSON body: an object, valid JSON and valid UTF-8, else ApiError 400.
nlohmann::json parse_json_body(std::string_view body);
// Validate a body into an ApiRequest (ApiError on any invalid field, 404 for another model's name).
ApiRequest parse_completion_request(const nlohmann::json& body, const ServedModel& model);
ApiRequest parse_chat_request(const nlohmann::json& body, const ServedModel& model);

// One choice's events gathered (non-streaming responses, and the usage of streaming ones).
struct ChoiceResult {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs, prompt_logprobs;
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0;
    bool done = false;
    std::string error;
    int error_status = 0;
};
void accumulate(ChoiceResult& choice, const GenerationEvent& event);

// Identity of one response: "cmpl-..." / "chatcmpl-..." id, creation time (unix s), model name.
struct ResponseMeta {
    std::string id, model;
    int64_t created = 0;
};
ResponseMeta new_response_meta(Endpoint endpoint, const std::string& model);

// The whole (non-streaming) response: text_completion or chat.completion, with usage.
nlohmann::json format_response(const ApiRequest& request, const std::vector<ChoiceResult>& choices,
                               const ResponseMeta& meta, const Tokenizer& tokenizer);

// Streaming: turns events into server-sent events ("data: {...}\n\n"), one chunk per Tokens event
// (none for an empty one), a final chunk per choice with its finish_reason, the usage chunk when asked
// for, and "data: [DONE]\n\n".
class StreamFormatter {
  public:
    StreamFormatter(const ApiRequest& request, ResponseMeta meta, const Tokenizer& tokenizer);
    // The chunks that go before any event: chat's role deltas, completions' echoed prompts.
    std::string begin();
    // The chunk(s) for one event of choice `index` ("" when there is nothing to send yet).
    std::string on_event(size_t index, const GenerationEvent& event);
    // Usage chunk (when include_usage) and [DONE].
    std::string end();
    // An error after the response started: an error object as one more event, then [DONE].
    std::string error(const ApiError& error);

  private:
    std::string chunk(size_t index, nlohmann::json delta_or_text, nlohmann::json logprobs,
                      const char* finish_reason);
    const ApiRequest& request_;
    ResponseMeta meta_;
    const Tokenizer& tokenizer_;
    std::vector<ChoiceResult> choices_;
    std::vector<int64_t> text_offset_;  // bytes of text so far per choice (completions' text_offset)
};

// Token text for logprob fields: the token's bytes, invalid UTF-8 (a split character) replaced by U+FFFD.
std::string token_text(const Tokenizer& tokenizer, int32_t id);
// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string utf8_lossy(std::string_view s);

}  // namespace hydra::serve
