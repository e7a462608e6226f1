// OpenAI request parsing and response formatting (see openai_api.h).
#include "serve/openai_api.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "io/json_member.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace hydra::serve {

using nlohmann::json;

namespace {

std::string default_type(int status) {
    switch (status) {
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        default:
            return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxStops = 4;

// --- typed field access: every wrong type / range is a 400 naming the field --------------------------

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, message, param);
}

// A rejected value as an error message shows it: ASCII (non-ASCII escaped, so a cut never splits a UTF-8
// sequence) and at most about 80 characters (the body may be megabytes).
std::string shown(const json& v) {
    std::string s = v.dump(-1, ' ', true);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

int64_t as_int(const json& v, const std::string& name) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
            bad(name, fmt::format("'{}' is too large", name));
        return v.get<int64_t>();
    }
    // A whole float (16.0) is an integer to JSON clients that have only doubles.
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
    }
    bad(name, fmt::format("'{}' must be an integer, got {}", name, shown(v)));
}

std::optional<int64_t> opt_int(const json& body, const char* name, int64_t lo, int64_t hi) {
    const json* v = json_member(body, name);
    if (!v) return std::nullopt;
    const int64_t x = as_int(*v, name);
    if (x < lo || x > hi) bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
    return x;
}

std::optional<double> opt_number(const json& body, const char* name, double lo, double hi) {
    const json* v = json_member(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad(name, fmt::format("'{}' must be a number, got {}", name, shown(*v)));
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
    return x;
}

std::optional<bool> opt_bool(const json& body, const char* name) {
    const json* v = json_member(body, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean, got {}", name, shown(*v)));
    return v->get<bool>();
}

void check_model(const json& body, const ServedModel& model) {
    const json* v = json_member(body, "model");
    if (!v) return;
    if (!v->is_string()) bad("model", fmt::format("'model' must be a string, got {}", shown(*v)));
    if (v->get<std::string>() != model.name)
        throw ApiError(404,
                       fmt::format("The model '{}' does not exist; this server serves '{}'",
                                   v->get<std::string>(), model.name),
                       "model", "", "model_not_found");
}

std::vector<std::string> parse_stop(const json& body) {
    const json* v = json_member(body, "stop");
    std::vector<std::string> stops;
    if (!v) return stops;
    auto one = [&](const json& s) {
        if (!s.is_string())
            bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", shown(s)));
        if (s.get_ref<const std::string&>().empty()) bad("stop", "'stop' strings must not be empty");
        stops.push_back(s.get<std::string>());
    };
    if (v->is_array()) {
        if (v->size() > kMaxStops)
            bad("stop", fmt::format("'stop' takes at most {} strings, got {}", kMaxStops, v->size()));
        for (const json& s : *v) one(s);
    } else {
        one(*v);
    }
    return stops;
}

// Fields both endpoints share: sampling, stop, seed, n, stream, penalties.
void parse_common(const json& body, const ServedModel& model, GenerationRequest& g, ApiRequest& r) {
    check_model(body, model);
    if (auto n = opt_int(body, "n", 1, 1 << 20); n && *n != 1)
        bad("n", fmt::format("'n' must be 1 (several choices per prompt are not supported), got {}", *n));
    if (auto b = opt_int(body, "best_of", 1, 1 << 20); b && *b != 1) bad("best_of", "'best_of' must be 1");
    for (const char* p : {"presence_penalty", "frequency_penalty"})
        if (auto x = opt_number(body, p, -2, 2); x && *x != 0)
            bad(p, fmt::format("'{}' is not supported (only 0)", p));
    if (auto t = opt_number(body, "temperature", 0, 2)) g.sampling.temperature = float(*t);
    if (auto p = opt_number(body, "top_p", 0, 1)) {
        if (*p <= 0) bad("top_p", "'top_p' must be in (0, 1]");
        g.sampling.top_p = float(*p);
    }
    // vLLM and llama-server take -1 for "off"; here 0 is off as well.
    if (auto k = opt_int(body, "top_k", -1, 1 << 30)) g.sampling.top_k = int(std::max<int64_t>(0, *k));
    if (const json* s = json_member(body, "seed")) g.sampling.seed = uint64_t(as_int(*s, "seed"));
    g.stop_strings = parse_stop(body);
    r.stream = opt_bool(body, "stream").value_or(false);
    if (const json* so = json_member(body, "stream_options")) {
        if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
        if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
        r.include_usage = opt_bool(*so, "include_usage").value_or(false);
    }
    const bool ignore_eos = opt_bool(body, "ignore_eos").value_or(false);
    if (!ignore_eos) g.stop_ids = model.eos_ids;
}

std::vector<int32_t> token_array(const json& a, const ServedModel& model) {
    std::vector<int32_t> ids;
    ids.reserve(a.size());
    const int64_t V = model.tokenizer->vocab_size();
    for (const json& t : a) {
        if (!t.is_number_integer())
            bad("prompt", fmt::format("prompt token ids must be integers, got {}", shown(t)));
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= V)
            bad("prompt", fmt::format("prompt token id {} is outside the vocabulary [0, {})", id, V));
        ids.push_back(int32_t(id));
    }
    return ids;
}

void check_prompt_fits(const GenerationRequest& g, const ServedModel& model, const char* max_field) {
    if (g.prompt.empty()) bad("prompt", "the prompt is empty");
    const int64_t P = int64_t(g.prompt.size());
    if (P > model.context)
        bad("prompt", fmt::format("the prompt has {} tokens but the context holds {}", P, model.context));
    if (P + g.max_tokens > model.context)
        bad(max_field, fmt::format("the prompt ({} tokens) plus {} ({}) is over the context of {} tokens; "
                                   "ask for at most {} tokens",
                                   P, max_field, g.max_tokens, model.context, model.context - P));
}

int logprob_count(const std::optional<int64_t>& v) {
    return v ? int(*v) : -1;
}

}  // namespace

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string type_,
                   std::string code_)
    : std::runtime_error(message),
      status(status_),
      param(std::move(param_)),
      type(type_.empty() ? default_type(status_) : std::move(type_)),
      code(std::move(code_)) {}

json error_json(int status, const std::string& message, const std::string& param, const std::string& type,
                const std::string& code) {
    json e;
    e["message"] = utf8_lossy(message);
    e["type"] = type.empty() ? default_type(status) : type;
    e["param"] = param.empty() ? json(nullptr) : json(param);
    e["code"] = code.empty() ? json(nullptr) : json(code);
    return json{{"error", e}};
}

std::string error_body(const ApiError& e) {
    return error_json(e.status, e.what(), e.param, e.type, e.code).dump();
}

ServedModel make_served_model(std::string name, const Tokenizer& tokenizer, int64_t context,
                              std::vector<int32_t> eos_ids) {
    ServedModel m;
    m.name = std::move(name);
    m.tokenizer = &tokenizer;
    m.context = context;
    m.eos_ids = std::move(eos_ids);
    const std::string& tmpl = tokenizer.vocab().chat_template;
    m.im_end = tokenizer.find_token("<|im_end|>");
    const bool has_chatml_tokens = m.im_end.has_value() && tokenizer.find_token("<|im_start|>").has_value();
    if (!tmpl.empty() && !is_chatml_template(tmpl)) {
        m.chat_template_error =
            "this model's chat template is not ChatML, and hydra serve applies ChatML "
            "templates only: use /v1/completions with the formatted prompt";
    } else if (!has_chatml_tokens) {
        m.chat_template_error =
            "this model has no chat template (no <|im_start|> / <|im_end|> tokens): use "
            "/v1/completions";
    } else {
        m.chatml = true;
        m.default_system = tmpl.empty() ? "" : chatml_default_system(tmpl).value_or("");
    }
    return m;
}

json parse_json_body(std::string_view body) {
    json j;
    try {
        // Depth-bounded: copying, comparing or printing a value recurses once per level, so a body of a
        // million '[' would take the server down on its first error message. nlohmann reports invalid
        // UTF-8 inside strings as a parse error too.
        j = parse_json_bounded(body, "the request body");
    } catch (const Error& e) {
        throw ApiError(400, e.what());
    }
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return j;
}

ApiRequest parse_completion_request(const json& body, const ServedModel& model) {
    ApiRequest r;
    r.endpoint = Endpoint::Completions;
    GenerationRequest g;
    parse_common(body, model, g, r);
    g.max_tokens = opt_int(body, "max_tokens", 0, INT64_MAX).value_or(16);
    r.logprobs = logprob_count(opt_int(body, "logprobs", 0, kMaxLogprobs));
    r.echo = opt_bool(body, "echo").value_or(false);
    g.top_logprobs = r.logprobs;
    g.prompt_logprobs = r.echo && r.logprobs >= 0;
    if (const json* s = json_member(body, "suffix");
        s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
        bad("suffix", "'suffix' is not supported");

    const json* p = json_member(body, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    // One entry per choice: (token ids, echo text).
    std::vector<std::pair<std::vector<int32_t>, std::string>> prompts;
    const Tokenizer& tok = *model.tokenizer;
    auto text_prompt = [&](const std::string& s) { prompts.emplace_back(tok.encode_with_bos(s), s); };
    auto ids_prompt = [&](const json& a) {
        std::vector<int32_t> ids = token_array(a, model);
        std::string text = utf8_lossy(tok.decode(ids));
        prompts.emplace_back(std::move(ids), std::move(text));
    };
    const char* shape =
        "'prompt' must be a string, an array of strings, an array of token ids or an array of "
        "token-id arrays";
    if (p->is_string()) {
        text_prompt(p->get<std::string>());
    } else if (p->is_array()) {
        if (p->empty()) bad("prompt", "'prompt' is empty");
        const json& first = p->front();
        if (first.is_number()) {
            ids_prompt(*p);
        } else if (first.is_string()) {
            for (const json& s : *p) {
                if (!s.is_string()) bad("prompt", shape);
                text_prompt(s.get<std::string>());
            }
        } else if (first.is_array()) {
            for (const json& a : *p) {
                if (!a.is_array()) bad("prompt", shape);
                ids_prompt(a);
            }
        } else {
            bad("prompt", shape);
        }
    } else {
        bad("prompt", shape);
    }
    constexpr size_t kMaxPrompts = 64;
    if (prompts.size() > kMaxPrompts)
        bad("prompt", fmt::format("at most {} prompts per request", kMaxPrompts));
    for (auto& [ids, text] : prompts) {
        GenerationRequest one = g;
        one.prompt = std::move(ids);
        check_prompt_fits(one, model, "max_tokens");
        r.generations.push_back(std::move(one));
        r.echo_texts.push_back(r.echo ? std::move(text) : std::string());
    }
    return r;
}

ApiRequest parse_chat_request(const json& body, const ServedModel& model) {
    ApiRequest r;
    r.endpoint = Endpoint::ChatCompletions;
    GenerationRequest g;
    parse_common(body, model, g, r);
    if (!model.chatml) throw ApiError(400, model.chat_template_error, "messages");
    const json* msgs = json_member(body, "messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object())
            bad(where, fmt::format("'{}' must be an object with 'role' and 'content'", where));
        const json* role = json_member(m, "role");
        if (!role || !role->is_string())
            bad(where + ".role", fmt::format("'{}.role' must be a string", where));
        const std::string& rs = role->get_ref<const std::string&>();
        if (rs != "system" && rs != "user" && rs != "assistant" && rs != "developer")
            bad(where + ".role",
                fmt::format("'{}.role' must be system, user or assistant, got '{}'", where, rs));
        const json* content = json_member(m, "content");
        std::string text;
        if (content && content->is_string()) {
            text = content->get<std::string>();
        } else if (content && content->is_array()) {
            // Content parts: only text parts can go through a text-only model.
            for (const json& part : *content) {
                const json* type = part.is_object() ? json_member(part, "type") : nullptr;
                const json* t = part.is_object() ? json_member(part, "text") : nullptr;
                if (!type || *type != "text" || !t || !t->is_string())
                    bad(where + ".content",
                        fmt::format("'{}.content' parts must be {{\"type\": \"text\", \"text\": "
                                    "string}} (this model reads text only)",
                                    where));
                text += t->get<std::string>();
            }
        } else {
            bad(where + ".content",
                fmt::format("'{}.content' must be a string or an array of text parts", where));
        }
        messages.push_back({rs == "developer" ? "system" : rs, std::move(text)});
    }
    // max_completion_tokens is the newer name of max_tokens; no limit = the rest of the context.
    std::optional<int64_t> max_tokens = opt_int(body, "max_completion_tokens", 0, INT64_MAX);
    if (!max_tokens) max_tokens = opt_int(body, "max_tokens", 0, INT64_MAX);
    const bool logprobs = opt_bool(body, "logprobs").value_or(false);
    const auto top = opt_int(body, "top_logprobs", 0, kMaxLogprobs);
    if (top && !logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.logprobs = logprobs ? int(top.value_or(0)) : -1;
    g.top_logprobs = r.logprobs;

    const Tokenizer& tok = *model.tokenizer;
    std::vector<ChatMessage> full;
    if (messages.front().role != "system" && !model.default_system.empty())
        full.push_back({"system", model.default_system});
    full.insert(full.end(), messages.begin(), messages.end());
    g.prompt = tok.encode(apply_chatml_template(full, true, ""), true);
    // <|im_end|> ends the assistant's turn (an end id like EOS: ignore_eos drops it too).
    if (model.im_end && !opt_bool(body, "ignore_eos").value_or(false) &&
        std::find(g.stop_ids.begin(), g.stop_ids.end(), *model.im_end) == g.stop_ids.end())
        g.stop_ids.push_back(*model.im_end);
    g.max_tokens = max_tokens.value_or(std::max<int64_t>(0, model.context - int64_t(g.prompt.size())));
    check_prompt_fits(
        g, model,
        max_tokens && json_member(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
    r.generations.push_back(std::move(g));
    r.echo_texts.emplace_back();
    return r;
}

void accumulate(ChoiceResult& c, const GenerationEvent& e) {
    if (e.kind == GenerationEvent::Kind::Error) {
        c.done = true;
        c.error = e.error;
        c.error_status = e.http_status ? e.http_status : 500;
        return;
    }
    // A Done event may carry the last text and tokens too (and, for max_tokens 0, the prompt logprobs).
    c.text += e.text;
    c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
    c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    c.prompt_logprobs.insert(c.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
    if (e.kind == GenerationEvent::Kind::Done) {
        c.done = true;
        c.finish_reason = e.finish_reason;
        c.prompt_tokens = e.prompt_tokens;
        c.completion_tokens = e.completion_tokens;
    }
}

ResponseMeta new_response_meta(Endpoint endpoint, const std::string& model) {
    static thread_local std::mt19937_64 gen{std::random_device{}()};
    ResponseMeta m;
    m.id = fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::Completions ? "cmpl" : "chatcmpl", gen(),
                       uint32_t(gen()));
    m.model = model;
    m.created =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    return m;
}

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto c = uint8_t(s[i]);
        int len = 0;
        uint32_t cp = 0;
        if (c < 0x80)
            len = 1, cp = c;
        else if ((c & 0xE0) == 0xC0)
            len = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            len = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            len = 4, cp = c & 0x07;
        bool ok = len > 0 && i + size_t(len) <= s.size();
        for (int k = 1; ok && k < len; ++k) {
            const auto cc = uint8_t(s[i + size_t(k)]);
            ok = (cc & 0xC0) == 0x80;
            cp = (cp << 6) | (cc & 0x3F);
        }
        // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
            ok = false;
        if (ok) {
            out.append(s.substr(i, size_t(len)));
            i += size_t(len);
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

std::string token_text(const Tokenizer& tokenizer, int32_t id) {
    return utf8_lossy(tokenizer.token_bytes(id));
}

namespace {

json logprob_value(float lp) {
    return std::isnan(lp) ? json(nullptr) : json(lp);
}

// Completions' logprobs object over `lps`, text offsets starting at `offset` (bytes).
json completion_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok, int64_t& offset) {
    json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
    for (const TokenLogprob& lp : lps) {
        tokens.push_back(token_text(tok, lp.token));
        values.push_back(logprob_value(lp.logprob));
        if (std::isnan(lp.logprob)) {
            tops.push_back(nullptr);
        } else {
            json top = json::object();
            for (const auto& [id, v] : lp.top) {
                const std::string t = token_text(tok, id);
                if (!top.contains(t)) top[t] = v;  // two ids with the same text: the likelier one
            }
            tops.push_back(std::move(top));
        }
        offsets.push_back(offset);
        offset += int64_t(tok.token_bytes(lp.token).size());
    }
    return json{
        {"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json bytes_of(const std::string& s) {
    json b = json::array();
    for (char c : s) b.push_back(int(uint8_t(c)));
    return b;
}

json chat_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
    json content = json::array();
    for (const TokenLogprob& lp : lps) {
        json top = json::array();
        for (const auto& [id, v] : lp.top)
            top.push_back(
                {{"token", token_text(tok, id)}, {"logprob", v}, {"bytes", bytes_of(tok.token_bytes(id))}});
        content.push_back({{"token", token_text(tok, lp.token)},
                           {"logprob", logprob_value(lp.logprob)},
                           {"bytes", bytes_of(tok.token_bytes(lp.token))},
                           {"top_logprobs", top}});
    }
    return json{{"content", content}};
}

json usage_json(const std::vector<ChoiceResult>& choices) {
    int64_t p = 0, c = 0;
    for (const ChoiceResult& r : choices) p += r.prompt_tokens, c += r.completion_tokens;
    return json{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
}

json finish(const std::string& reason) {
    return reason.empty() ? json(nullptr) : json(reason);
}

}  // namespace

json format_response(const ApiRequest& request, const std::vector<ChoiceResult>& choices,
                     const ResponseMeta& meta, const Tokenizer& tok) {
    json out;
    out["id"] = meta.id;
    out["created"] = meta.created;
    out["model"] = meta.model;
    json cs = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        const ChoiceResult& c = choices[i];
        json choice;
        choice["index"] = i;
        if (request.endpoint == Endpoint::Completions) {
            const std::string& echo = i < request.echo_texts.size() ? request.echo_texts[i] : std::string();
            choice["text"] = utf8_lossy(echo + c.text);
            if (request.logprobs >= 0) {
                std::vector<TokenLogprob> all;
                if (request.echo) all = c.prompt_logprobs;
                all.insert(all.end(), c.logprobs.begin(), c.logprobs.end());
                // Without echo, offsets count from the end of the prompt (as OpenAI's do).
                int64_t offset = 0;
                if (!request.echo) offset = int64_t(tok.decode(request.generations[i].prompt).size());
                choice["logprobs"] = completion_logprobs(all, tok, offset);
            } else {
                choice["logprobs"] = nullptr;
            }
        } else {
            choice["message"] = {{"role", "assistant"}, {"content", utf8_lossy(c.text)}};
            choice["logprobs"] = request.logprobs >= 0 ? chat_logprobs(c.logprobs, tok) : json(nullptr);
        }
        choice["finish_reason"] = finish(c.finish_reason);
        cs.push_back(std::move(choice));
    }
    out["object"] = request.endpoint == Endpoint::Completions ? "text_completion" : "chat.completion";
    out["choices"] = std::move(cs);
    out["usage"] = usage_json(choices);
    return out;
}

StreamFormatter::StreamFormatter(const ApiRequest& request, ResponseMeta meta, const Tokenizer& tokenizer)
    : request_(request),
      meta_(std::move(meta)),
      tokenizer_(tokenizer),
      choices_(request.generations.size()),
      text_offset_(request.generations.size(), 0) {
    if (!request.echo)
        for (size_t i = 0; i < text_offset_.size(); ++i)
            text_offset_[i] = int64_t(tokenizer.decode(request.generations[i].prompt).size());
}

std::string StreamFormatter::chunk(size_t index, json delta_or_text, json logprobs,
                                   const char* finish_reason) {
    json c;
    c["id"] = meta_.id;
    c["created"] = meta_.created;
    c["model"] = meta_.model;
    json choice;
    choice["index"] = index;
    if (request_.endpoint == Endpoint::Completions) {
        c["object"] = "text_completion";
        choice["text"] = std::move(delta_or_text);
    } else {
        c["object"] = "chat.completion.chunk";
        choice["delta"] = std::move(delta_or_text);
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
    c["choices"] = json::array({std::move(choice)});
    return "data: " + c.dump() + "\n\n";
}

std::string StreamFormatter::begin() {
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) {
        if (request_.endpoint == Endpoint::ChatCompletions) {
            out += chunk(i, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
        } else if (request_.echo && request_.logprobs < 0 && !request_.echo_texts[i].empty()) {
            // With logprobs the echoed prompt goes out with its logprobs, in the first event's chunk.
            out += chunk(i, utf8_lossy(request_.echo_texts[i]), nullptr, nullptr);
        }
    }
    return out;
}

std::string StreamFormatter::on_event(size_t index, const GenerationEvent& e) {
    if (index >= choices_.size()) return "";
    if (e.kind == GenerationEvent::Kind::Error)
        return error(ApiError(e.http_status ? e.http_status : 500, e.error));
    ChoiceResult& c = choices_[index];
    accumulate(c, e);
    const bool completions = request_.endpoint == Endpoint::Completions;
    std::string text = e.text;
    std::vector<TokenLogprob> lps;
    if (completions && request_.echo && request_.logprobs >= 0 && !e.prompt_logprobs.empty()) {
        text = request_.echo_texts[index] + text;
        lps = e.prompt_logprobs;
    }
    lps.insert(lps.end(), e.logprobs.begin(), e.logprobs.end());
    std::string out;
    if (!text.empty() || !lps.empty()) {
        json logprobs = nullptr;
        if (request_.logprobs >= 0)
            logprobs = completions ? completion_logprobs(lps, tokenizer_, text_offset_[index])
                                   : chat_logprobs(e.logprobs, tokenizer_);
        out += chunk(index, completions ? json(utf8_lossy(text)) : json{{"content", utf8_lossy(text)}},
                     std::move(logprobs), nullptr);
    }
    if (e.kind == GenerationEvent::Kind::Done)
        out += chunk(index, completions ? json("") : json::object(), nullptr, e.finish_reason.c_str());
    return out;
}

std::string StreamFormatter::end() {
    std::string out;
    if (request_.include_usage) {
        json c;
        c["id"] = meta_.id;
        c["object"] =
            request_.endpoint == Endpoint::Completions ? "text_completion" : "chat.completion.chunk";
        c["created"] = meta_.created;
        c["model"] = meta_.model;
        c["choices"] = json::array();
        c["usage"] = usage_json(choices_);
        out += "data: " + c.dump() + "\n\n";
    }
    out += "data: [DONE]\n\n";
    return out;
}

std::string StreamFormatter::error(const ApiError& e) {
    return "data: " + error_body(e) + "\n\n";
}

}  // namespace hydra::serve
