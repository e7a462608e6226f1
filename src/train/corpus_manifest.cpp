// Reading and checking a corpus manifest (see corpus_manifest.h).
#include "train/corpus_manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

int64_t get_int(const json& o, const char* key, const std::string& where) {
    HYDRA_CHECK(o.is_object() && o.contains(key), "{}: missing field {}", where, key);
    const json& v = o.at(key);
    HYDRA_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, "{}: field {} must be a non-negative integer",
                where, key);
    return v.get<int64_t>();
}

std::pair<int64_t, int64_t> get_span(const json& o, const char* key, const std::string& where) {
    HYDRA_CHECK(o.contains(key) && o.at(key).is_array() && o.at(key).size() == 2,
                "{}: field spans.{} must be [begin, end]", where, key);
    const json& a = o.at(key);
    for (const json& x : a)
        HYDRA_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0,
                    "{}: spans.{} must hold non-negative integers", where, key);
    const int64_t b = a[0].get<int64_t>(), e = a[1].get<int64_t>();
    HYDRA_CHECK(b <= e, "{}: spans.{} = [{}, {}] ends before it begins", where, key, b, e);
    return {b, e};
}

}  // namespace

CorpusManifest parse_corpus_manifest(const json& j, const std::string& where) {
    HYDRA_CHECK(j.is_object(), "{}: top level must be an object", where);
    HYDRA_CHECK(j.value("format", "") == kCorpusFormat, "{}: field format must be \"{}\"", where,
                kCorpusFormat);
    HYDRA_CHECK(get_int(j, "version", where) == 1, "{}: field version must be 1", where);
    CorpusManifest m;
    HYDRA_CHECK(j.contains("tokenizer") && j["tokenizer"].is_string(), "{}: field tokenizer must be a string",
                where);
    m.tokenizer = j["tokenizer"].get<std::string>();
    m.vocab_size = int32_t(get_int(j, "vocab_size", where));
    m.eos_id = int32_t(get_int(j, "eos_id", where));
    HYDRA_CHECK(j.contains("totals") && j["totals"].is_object(), "{}: missing object totals", where);
    m.train_tokens = get_int(j["totals"], "train_tokens", where + ": totals");
    m.heldout_tokens = get_int(j["totals"], "heldout_tokens", where + ": totals");
    HYDRA_CHECK(j.contains("sources") && j["sources"].is_array() && !j["sources"].empty(),
                "{}: field sources must be a non-empty array", where);
    int64_t next_train = 0, next_heldout = 0;
    for (size_t i = 0; i < j["sources"].size(); ++i) {
        const json& s = j["sources"][i];
        const std::string w = fmt::format("{}: sources[{}]", where, i);
        HYDRA_CHECK(s.is_object() && s.contains("name") && s["name"].is_string(),
                    "{}: field name must be a string", w);
        CorpusSourceEntry e;
        e.name = s["name"].get<std::string>();
        HYDRA_CHECK(s.contains("weight") && s["weight"].is_number() && s["weight"].get<double>() >= 0,
                    "{}: field weight must be a number >= 0", w);
        e.weight = s["weight"].get<double>();
        HYDRA_CHECK(s.contains("spans") && s["spans"].is_object(), "{}: missing object spans", w);
        std::tie(e.train_begin, e.train_end) = get_span(s["spans"], "train", w);
        std::tie(e.heldout_begin, e.heldout_end) = get_span(s["spans"], "heldout", w);
        HYDRA_CHECK(e.train_begin == next_train && e.heldout_begin == next_heldout,
                    "{} ({}): spans must follow the previous source's (train from {}, held-out from {})", w,
                    e.name, next_train, next_heldout);
        next_train = e.train_end;
        next_heldout = e.heldout_end;
        for (const CorpusSourceEntry& o : m.sources)
            HYDRA_CHECK(o.name != e.name, "{}: source {} is listed twice", where, e.name);
        m.sources.push_back(e);
    }
    HYDRA_CHECK(next_train == m.train_tokens && next_heldout == m.heldout_tokens,
                "{}: the spans end at {} / {} tokens but totals say {} / {}", where, next_train, next_heldout,
                m.train_tokens, m.heldout_tokens);
    return m;
}

CorpusManifest read_corpus_manifest(const std::string& dir) {
    const fs::path p = fs::path(dir) / "manifest.json";
    HYDRA_CHECK(fs::is_regular_file(p),
                "{}: missing; not a corpus directory (build one with `hydra corpus build`)", p.string());
    json j = parse_json_bounded(read_text_file(p), p.string());
    return parse_corpus_manifest(j, p.string());
}

bool is_corpus_dir(const std::string& dir) {
    const fs::path p = fs::path(dir) / "manifest.json";
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return false;
    try {
        const json j = parse_json_bounded(read_text_file(p), p.string());
        return j.is_object() && j.contains("format") && j["format"] == kCorpusFormat;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace hydra
