// Mix config parsing (see mix_config.h).
#include "train/mix_config.h"

#include <toml++/toml.h>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"

namespace hydra {

namespace fs = std::filesystem;

std::vector<double> parse_mix_weights(std::string_view text, const std::string& where,
                                      const CorpusManifest& m) {
    std::map<std::string, double> named;
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] == '{') {
        nlohmann::json j = parse_json_bounded(text, where);
        HYDRA_CHECK(j.contains("weights") && j["weights"].is_object(), "{}: needs an object \"weights\"",
                    where);
        for (const auto& [k, v] : j["weights"].items()) {
            HYDRA_CHECK(v.is_number(), "{}: weights.{} must be a number", where, k);
            named[k] = v.get<double>();
        }
    } else {
        toml::table t;
        try {
            t = toml::parse(text, where);
        } catch (const toml::parse_error& e) {
            std::ostringstream ss;
            ss << e.description() << " at " << e.source().begin;
            fail("{}: not valid TOML: {}", where, ss.str());
        }
        const toml::table* w = t["weights"].as_table();
        HYDRA_CHECK(w, "{}: needs a [weights] table", where);
        for (const auto& [k, v] : *w) {
            const std::optional<double> x = v.value<double>();
            HYDRA_CHECK(x.has_value(), "{}: weights.{} must be a number", where, std::string(k.str()));
            named[std::string(k.str())] = *x;
        }
    }
    std::vector<double> out(m.sources.size(), 0.0);
    for (const auto& [k, v] : named) {
        HYDRA_CHECK(std::isfinite(v) && v >= 0, "{}: weights.{} = {} must be a finite number >= 0", where, k,
                    v);
        size_t i = 0;
        while (i < m.sources.size() && m.sources[i].name != k) ++i;
        HYDRA_CHECK(i < m.sources.size(), "{}: weights.{}: the corpus has no source of that name", where, k);
        out[i] = v;
    }
    double usable = 0;
    for (size_t i = 0; i < out.size(); ++i)
        if (m.sources[i].train_end > m.sources[i].train_begin) usable += out[i];
    HYDRA_CHECK(usable > 0, "{}: no source with training tokens has a weight above 0", where);
    return out;
}

std::vector<double> read_mix_weights(const std::string& path, const CorpusManifest& m) {
    std::error_code ec;
    HYDRA_CHECK(fs::is_regular_file(path, ec), "{}: mix config missing or not a regular file", path);
    HYDRA_CHECK(fs::file_size(path, ec) <= (1u << 20), "{}: more than 1 MiB: not a mix config", path);
    return parse_mix_weights(read_text_file(path), path, m);
}

std::vector<double> default_mix_weights(const std::string& dir, const CorpusManifest& m) {
    const fs::path p = fs::path(dir) / "mix.json";
    if (fs::exists(p)) return read_mix_weights(p.string(), m);
    std::vector<double> out;
    for (const CorpusSourceEntry& s : m.sources) out.push_back(s.weight);
    return out;
}

}  // namespace hydra
