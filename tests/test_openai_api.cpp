// Tests of the OpenAI API layer of hydra serve (serve/openai_api.h) without HTTP: request validation
// (every wrong type / range names its field), prompt shapes, the chat template, and the response,
// logprob and streaming-chunk formats; plus the metrics text and the API-key compare.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "serve/http_server.h"
#include "serve/openai_api.h"
#include "serve/serve_metrics.h"
#include "serve_test_model.h"
#include "tokenizer/chat_template.h"

namespace hydra::serve {
namespace {

using nlohmann::json;

struct Fixture {
    Tokenizer tok{test::tiny_byte_vocab(), "tiny"};
    ServedModel model = make_served_model("tiny", tok, 64, {test::kTinyEos});
};

Fixture& fx() {
    static Fixture f;
    return f;
}

ApiRequest completion(const json& body) {
    return parse_completion_request(body, fx().model);
}
ApiRequest chat(const json& body) {
    return parse_chat_request(body, fx().model);
}

// The ApiError a body gives: its status and param.
template <typename F>
std::pair<int, std::string> error_of(F&& f) {
    try {
        f();
    } catch (const ApiError& e) {
        return {e.status, e.param};
    }
    return {0, "no error"};
}

std::vector<int32_t> bytes(const std::string& s) {
    return fx().tok.encode(s);
}

TEST(OpenAiApi, CompletionDefaults) {
    ApiRequest r = completion({{"prompt", "hi there"}});
    ASSERT_EQ(r.generations.size(), 1u);
    const GenerationRequest& g = r.generations[0];
    EXPECT_EQ(g.prompt, bytes("hi there"));
    EXPECT_EQ(g.max_tokens, 16);
    EXPECT_EQ(g.sampling.temperature, 1.0f);
    EXPECT_EQ(g.sampling.top_p, 1.0f);
    EXPECT_EQ(g.sampling.top_k, 0);
    EXPECT_FALSE(g.sampling.seed.has_value());
    EXPECT_EQ(g.stop_ids, std::vector<int32_t>{test::kTinyEos});
    EXPECT_TRUE(g.stop_strings.empty());
    EXPECT_EQ(g.top_logprobs, -1);
    EXPECT_FALSE(g.prompt_logprobs);
    EXPECT_FALSE(r.stream);
}

TEST(OpenAiApi, CompletionFields) {
    ApiRequest r = completion({{"model", "tiny"},
                               {"prompt", "ab"},
                               {"max_tokens", 5},
                               {"temperature", 0},
                               {"top_p", 0.5},
                               {"top_k", 7},
                               {"seed", 42},
                               {"stop", {"x", "yz"}},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}},
                               {"logprobs", 3},
                               {"echo", true},
                               {"n", 1},
                               {"ignore_eos", true}});
    const GenerationRequest& g = r.generations[0];
    EXPECT_EQ(g.max_tokens, 5);
    EXPECT_EQ(g.sampling.temperature, 0.0f);
    EXPECT_EQ(g.sampling.top_p, 0.5f);
    EXPECT_EQ(g.sampling.top_k, 7);
    EXPECT_EQ(g.sampling.seed, std::optional<uint64_t>(42));
    EXPECT_EQ(g.stop_strings, (std::vector<std::string>{"x", "yz"}));
    EXPECT_TRUE(g.stop_ids.empty());  // ignore_eos
    EXPECT_EQ(g.top_logprobs, 3);
    EXPECT_TRUE(g.prompt_logprobs);
    EXPECT_TRUE(r.stream && r.include_usage && r.echo);
    EXPECT_EQ(r.echo_texts, std::vector<std::string>{"ab"});
    EXPECT_EQ(completion({{"prompt", "a"}, {"stop", "q"}, {"max_tokens", 2.0}}).generations[0].stop_strings,
              std::vector<std::string>{"q"});
}

TEST(OpenAiApi, PromptShapes) {
    ApiRequest two = completion({{"prompt", {"ab", "cde"}}});
    ASSERT_EQ(two.generations.size(), 2u);
    EXPECT_EQ(two.generations[1].prompt, bytes("cde"));
    ApiRequest ids = completion({{"prompt", {97, 98, 257}}, {"echo", true}});
    EXPECT_EQ(ids.generations[0].prompt, (std::vector<int32_t>{97, 98, 257}));
    EXPECT_EQ(ids.echo_texts[0], "ab<|im_start|>");
    ApiRequest lists = completion({{"prompt", {{1, 2}, {3}}}});
    ASSERT_EQ(lists.generations.size(), 2u);
    EXPECT_EQ(lists.generations[1].prompt, std::vector<int32_t>{3});
    for (const json& bad : {json(5), json::array(), json({1, "a"}), json({"a", 1}), json({{1}, 2}),
                            json({259}), json({-1}), json({json::object()}), json({1.5}), json("")})
        EXPECT_EQ(error_of([&] {
                      completion({{"prompt", bad}});
                  }),
                  std::make_pair(400, std::string("prompt")))
            << bad.dump();
    EXPECT_EQ(error_of([&] { completion(json::object()); }), std::make_pair(400, std::string("prompt")));
}

TEST(OpenAiApi, InvalidFieldsNameTheField) {
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"max_tokens", "5"}}, "max_tokens"},
        {{{"max_tokens", -1}}, "max_tokens"},
        {{{"max_tokens", 1.5}}, "max_tokens"},
        {{{"temperature", "hot"}}, "temperature"},
        {{{"temperature", 2.5}}, "temperature"},
        {{{"temperature", -0.1}}, "temperature"},
        {{{"top_p", 0}}, "top_p"},
        {{{"top_p", 1.1}}, "top_p"},
        {{{"top_k", -2}}, "top_k"},
        {{{"top_k", true}}, "top_k"},
        {{{"seed", "x"}}, "seed"},
        {{{"stop", 3}}, "stop"},
        {{{"stop", {"a", "b", "c", "d", "e"}}}, "stop"},
        {{{"stop", {"a", 1}}}, "stop"},
        {{{"stop", ""}}, "stop"},
        {{{"stream", "yes"}}, "stream"},
        {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
        {{{"logprobs", 21}}, "logprobs"},
        {{{"logprobs", -1}}, "logprobs"},
        {{{"echo", 1}}, "echo"},
        {{{"n", 2}}, "n"},
        {{{"ignore_eos", "no"}}, "ignore_eos"},
        {{{"model", 3}}, "model"},
        {{{"presence_penalty", 1}}, "presence_penalty"},
        {{{"max_tokens", 63}}, "max_tokens"},  // 2 prompt tokens + 63 > the context of 64
    };
    for (const auto& [extra, param] : cases) {
        json body = {{"prompt", "ab"}};
        body.update(extra);
        const auto [status, got] = error_of([&] { completion(body); });
        EXPECT_EQ(status, 400) << body.dump();
        EXPECT_EQ(got, param) << body.dump();
    }
    EXPECT_EQ(error_of([&] {
                  completion({{"prompt", "ab"}, {"model", "gpt-4"}});
              }),
              std::make_pair(404, std::string("model")));
    EXPECT_NO_THROW(completion({{"prompt", "ab"}, {"max_tokens", 62}}));  // exactly the context
    EXPECT_NO_THROW(completion({{"prompt", "ab"}, {"temperature", nullptr}, {"user", "u"}}));
}

TEST(OpenAiApi, JsonBody) {
    EXPECT_EQ(parse_json_body(R"({"a": 1})")["a"], 1);
    for (const std::string bad :
         {"{", "", "[1]", "nope", "{\"a\": \"\xff\"}", "{\"a\": \"\xc3\"}", "{\"a\":1}x"})
        EXPECT_EQ(error_of([&] { parse_json_body(bad); }).first, 400) << bad;
}

// A value nested a million levels deep (a 2 MB body) once took the server down: printing it into the error
// message recursed once per level. Refused at parsing now; and a rejected value shows at most ~80
// characters of itself.
TEST(OpenAiApi, DeepOrHugeValuesAreRefusedBriefly) {
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    EXPECT_EQ(error_of([&] { parse_json_body("{\"prompt\": \"hi\", \"max_tokens\": " + deep + "}"); }).first,
              400);
    EXPECT_NO_THROW(parse_json_body("{\"a\": " + std::string(60, '[') + std::string(60, ']') + "}"));
    json body = {{"prompt", "hi"}, {"max_tokens", std::string(100000, 'x')}};
    try {
        completion(body);
        ADD_FAILURE() << "a string max_tokens was accepted";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "max_tokens");
        EXPECT_LT(std::string(e.what()).size(), 200u) << e.what();
    }
}

TEST(OpenAiApi, ChatTemplateAndStops) {
    ApiRequest r = chat({{"messages", {{{"role", "user"}, {"content", "hey"}}}}, {"max_tokens", 4}});
    ASSERT_EQ(r.generations.size(), 1u);
    const GenerationRequest& g = r.generations[0];
    const std::string expected =
        "<|im_start|>system\nYou are tiny.<|im_end|>\n<|im_start|>user\nhey<|im_end|>\n"
        "<|im_start|>assistant\n";
    EXPECT_EQ(g.prompt, fx().tok.encode(expected, true));
    EXPECT_EQ(g.stop_ids, (std::vector<int32_t>{test::kTinyEos, test::kTinyImEnd}));
    // A system message replaces the default one; text parts are joined; no max_tokens = the rest.
    ApiRequest s =
        chat({{"messages",
               {{{"role", "system"}, {"content", "S"}},
                {{"role", "user"},
                 {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
              {"logprobs", true},
              {"top_logprobs", 2}});
    const std::string sys =
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_EQ(s.generations[0].prompt, fx().tok.encode(sys, true));
    EXPECT_EQ(s.generations[0].max_tokens, 64 - int64_t(s.generations[0].prompt.size()));
    EXPECT_EQ(s.logprobs, 2);
    EXPECT_EQ(s.generations[0].top_logprobs, 2);
    const std::vector<std::pair<json, std::string>> cases = {
        {{{"messages", "hi"}}, "messages"},
        {{{"messages", json::array()}}, "messages"},
        {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, "messages[0].role"},
        {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content"},
        {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, "messages[0].content"},
        {{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, "top_logprobs"},
        {{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"logprobs", 2}}, "logprobs"},
        {{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 64}}, "max_tokens"},
    };
    for (const auto& [body, param] : cases) {
        const auto [status, got] = error_of([&] { chat(body); });
        EXPECT_EQ(status, 400) << body.dump();
        EXPECT_EQ(got, param) << body.dump();
    }
}

TEST(OpenAiApi, ChatNeedsChatml) {
    TokenizerVocab v = test::tiny_byte_vocab();
    v.chat_template = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}";
    Tokenizer tok(v, "llama2ish");
    const ServedModel m = make_served_model("x", tok, 64, {});
    EXPECT_FALSE(m.chatml);
    try {
        parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, m);
        FAIL() << "no error";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_NE(std::string(e.what()).find("ChatML"), std::string::npos);
    }
}

TokenLogprob lp(int32_t token, float logprob, std::vector<std::pair<int32_t, float>> top = {}) {
    TokenLogprob t;
    t.token = token;
    t.logprob = logprob;
    t.top = std::move(top);
    return t;
}

TEST(OpenAiApi, CompletionResponseWithEchoAndLogprobs) {
    ApiRequest r = completion({{"prompt", "ab"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}});
    ChoiceResult c;
    GenerationEvent first;
    first.tokens = {'c'};
    first.text = "c";
    first.prompt_logprobs = {lp('a', NAN), lp('b', -1.5f, {{'x', -0.5f}})};
    first.logprobs = {lp('c', -0.25f, {{'c', -0.25f}})};
    accumulate(c, first);
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::Done;
    done.finish_reason = "length";
    done.prompt_tokens = 2;
    done.completion_tokens = 1;
    accumulate(c, done);
    const json out = format_response(r, {c}, {"cmpl-1", "tiny", 5}, fx().tok);
    EXPECT_EQ(out["object"], "text_completion");
    EXPECT_EQ(out["id"], "cmpl-1");
    EXPECT_EQ(out["model"], "tiny");
    const json& ch = out["choices"][0];
    EXPECT_EQ(ch["index"], 0);
    EXPECT_EQ(ch["text"], "abc");
    EXPECT_EQ(ch["finish_reason"], "length");
    const json& l = ch["logprobs"];
    EXPECT_EQ(l["tokens"], json({"a", "b", "c"}));
    EXPECT_TRUE(l["token_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(l["token_logprobs"][1].get<float>(), -1.5f);
    EXPECT_FLOAT_EQ(l["token_logprobs"][2].get<float>(), -0.25f);
    EXPECT_TRUE(l["top_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(l["top_logprobs"][1]["x"].get<float>(), -0.5f);
    EXPECT_EQ(l["text_offset"], json({0, 1, 2}));
    EXPECT_EQ(out["usage"], json({{"prompt_tokens", 2}, {"completion_tokens", 1}, {"total_tokens", 3}}));

    // Without echo: only the completion's logprobs, offsets after the prompt.
    ApiRequest plain = completion({{"prompt", "ab"}, {"logprobs", 0}});
    const json p = format_response(plain, {c}, {"cmpl-2", "tiny", 5}, fx().tok);
    EXPECT_EQ(p["choices"][0]["text"], "c");
    EXPECT_EQ(p["choices"][0]["logprobs"]["tokens"], json({"c"}));
    EXPECT_EQ(p["choices"][0]["logprobs"]["text_offset"], json({2}));
}

TEST(OpenAiApi, ChatResponseAndLogprobs) {
    ApiRequest r = chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                         {"logprobs", true},
                         {"top_logprobs", 1},
                         {"max_tokens", 3}});
    ChoiceResult c;
    GenerationEvent e;
    e.tokens = {'o', 'k'};
    e.text = "ok";
    e.logprobs = {lp('o', -0.1f, {{'o', -0.1f}}), lp('k', -0.2f, {{'q', -0.05f}})};
    accumulate(c, e);
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::Done;
    done.finish_reason = "stop";
    done.prompt_tokens = 30;
    done.completion_tokens = 2;
    accumulate(c, done);
    const json out = format_response(r, {c}, {"chatcmpl-1", "tiny", 5}, fx().tok);
    EXPECT_EQ(out["object"], "chat.completion");
    const json& ch = out["choices"][0];
    EXPECT_EQ(ch["message"], json({{"role", "assistant"}, {"content", "ok"}}));
    EXPECT_EQ(ch["finish_reason"], "stop");
    const json& content = ch["logprobs"]["content"];
    ASSERT_EQ(content.size(), 2u);
    EXPECT_EQ(content[1]["token"], "k");
    EXPECT_EQ(content[1]["bytes"], json({int('k')}));
    EXPECT_EQ(content[1]["top_logprobs"][0]["token"], "q");
    EXPECT_EQ(out["usage"]["total_tokens"], 32);
}

// The "data: ..." payloads of an SSE string.
std::vector<std::string> sse_data(const std::string& s) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = s.find("data: ", pos)) != std::string::npos) {
        const size_t end = s.find("\n\n", pos);
        out.push_back(s.substr(pos + 6, end - pos - 6));
        pos = end;
    }
    return out;
}

TEST(OpenAiApi, ChatStreamChunks) {
    ApiRequest r = chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}});
    StreamFormatter f(r, {"chatcmpl-9", "tiny", 5}, fx().tok);
    std::string all = f.begin();
    GenerationEvent e;
    e.tokens = {'h'};
    e.text = "h";
    all += f.on_event(0, e);
    GenerationEvent pending;  // a token whose text is held back sends nothing
    pending.tokens = {0xC3};
    EXPECT_EQ(f.on_event(0, pending), "");
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::Done;
    done.finish_reason = "stop";
    done.prompt_tokens = 20;
    done.completion_tokens = 2;
    all += f.on_event(0, done);
    all += f.end();
    const std::vector<std::string> d = sse_data(all);
    ASSERT_EQ(d.size(), 5u) << all;
    const json c0 = json::parse(d[0]), c1 = json::parse(d[1]), c2 = json::parse(d[2]), u = json::parse(d[3]);
    EXPECT_EQ(c0["object"], "chat.completion.chunk");
    EXPECT_EQ(c0["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(c1["choices"][0]["delta"], json({{"content", "h"}}));
    EXPECT_TRUE(c1["choices"][0]["finish_reason"].is_null());
    EXPECT_EQ(c2["choices"][0]["delta"], json::object());
    EXPECT_EQ(c2["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(u["choices"], json::array());
    EXPECT_EQ(u["usage"]["completion_tokens"], 2);
    EXPECT_EQ(d[4], "[DONE]");
    EXPECT_EQ(c0["id"], "chatcmpl-9");
    EXPECT_EQ(all.substr(all.size() - 14), "data: [DONE]\n\n");
}

TEST(OpenAiApi, CompletionStreamChunksWithTwoPromptsAndEcho) {
    ApiRequest r = completion({{"prompt", {"ab", "c"}}, {"stream", true}, {"echo", true}});
    StreamFormatter f(r, {"cmpl-3", "tiny", 5}, fx().tok);
    const std::vector<std::string> begin = sse_data(f.begin());
    ASSERT_EQ(begin.size(), 2u);
    EXPECT_EQ(json::parse(begin[1])["choices"][0]["text"], "c");
    EXPECT_EQ(json::parse(begin[1])["choices"][0]["index"], 1);
    GenerationEvent e;
    e.tokens = {'z'};
    e.text = "z";
    const json c = json::parse(sse_data(f.on_event(1, e))[0]);
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["choices"][0]["index"], 1);
    EXPECT_EQ(c["choices"][0]["text"], "z");
    EXPECT_EQ(sse_data(f.end()), std::vector<std::string>{"[DONE]"});
}

TEST(OpenAiApi, ErrorsAndText) {
    const json e = json::parse(error_body(ApiError(400, "bad 'max_tokens'", "max_tokens")));
    EXPECT_EQ(e["error"]["message"], "bad 'max_tokens'");
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_EQ(e["error"]["param"], "max_tokens");
    EXPECT_TRUE(e["error"]["code"].is_null());
    EXPECT_EQ(json::parse(error_body(ApiError(401, "no")))["error"]["type"], "authentication_error");
    EXPECT_EQ(utf8_lossy("a\xC3\xA9"), "a\xC3\xA9");
    EXPECT_EQ(utf8_lossy("a\xC3"), "a\xEF\xBF\xBD");
    EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
    EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
    EXPECT_EQ(token_text(fx().tok, 0xC3), "\xEF\xBF\xBD");
}

TEST(OpenAiApi, BearerCompare) {
    EXPECT_TRUE(bearer_matches("Bearer k3y", "k3y"));
    EXPECT_FALSE(bearer_matches("Bearer k3", "k3y"));
    EXPECT_FALSE(bearer_matches("Bearer k3yy", "k3y"));
    EXPECT_FALSE(bearer_matches("bearer k3y", "k3y"));
    EXPECT_FALSE(bearer_matches("", "k3y"));
    EXPECT_FALSE(bearer_matches("Bearer K3y", "k3y"));
}

TEST(ServeMetrics, PrometheusText) {
    ServeMetrics m;
    m.count_request("/v1/completions");
    m.count_response(200);
    m.count_response(200);
    m.count_response(400);
    SchedulerStats s;
    s.requests_waiting = 3;
    s.generated_tokens_total = 17;
    s.cache.used_bytes = 1024;
    const std::string t = m.render(s);
    EXPECT_EQ(m.responses(200), 2);
    for (const char* line :
         {"hydra_http_requests_total{route=\"/v1/completions\"} 1\n",
          "hydra_http_responses_total{code=\"200\"} 2\n", "hydra_http_responses_total{code=\"400\"} 1\n",
          "hydra_requests_waiting 3\n", "hydra_generated_tokens_total 17\n", "hydra_cache_used_bytes 1024\n",
          "# TYPE hydra_requests_running gauge\n", "hydra_prefix_cache_entries 0\n"})
        EXPECT_NE(t.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace hydra::serve
