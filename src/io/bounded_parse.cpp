// Size- and depth-limited input parsing (see bounded_parse.h).
#include "io/bounded_parse.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <toml++/toml.h>

#include "core/error.h"

namespace hydra {

namespace {

using json = nlohmann::json;

// Thrown by the parser callback to stop at the first too-deep value (caught below).
struct TooDeep {};

// An upper bound of the nesting depth of the tree toml++ would build from `text`: for each
// statement, the parts of the current table header + the parts of the dotted key + the deepest
// inline array / table of the value. Strings (all four kinds) and comments are skipped.
int toml_depth_bound(const std::string& text) {
    const size_t n = text.size();
    size_t i = 0;
    int header_parts = 0, bound = 0;
    auto skip_string = [&]() {  // at a quote; leaves i after the closing quote
        const char q = text[i];
        const bool multi = i + 2 < n && text[i + 1] == q && text[i + 2] == q;
        i += multi ? 3 : 1;
        while (i < n) {
            if (q == '"' && text[i] == '\\') {
                i += 2;
                continue;
            }
            if (text[i] == q && (!multi || (i + 2 < n && text[i + 1] == q && text[i + 2] == q))) {
                i += multi ? 3 : 1;
                // A multi-line string may end with up to two more quotes of content.
                while (multi && i < n && text[i] == q) ++i;
                return;
            }
            if (!multi && text[i] == '\n') return;  // unterminated: toml++ reports it
            ++i;
        }
    };
    auto skip_line = [&]() {
        while (i < n && text[i] != '\n') ++i;
    };
    // Counts the parts of a dotted key up to (not including) one of `stops`.
    auto key_parts = [&](const char* stops) {
        int parts = 1;
        while (i < n && !std::strchr(stops, text[i]) && text[i] != '\n') {
            if (text[i] == '"' || text[i] == '\'') {
                skip_string();
                continue;
            }
            if (text[i] == '.') ++parts;
            ++i;
        }
        return parts;
    };
    while (i < n) {
        while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) ++i;
        if (i >= n) break;
        if (text[i] == '#') {
            skip_line();
            continue;
        }
        if (text[i] == '[') {  // [table] or [[array of tables]]
            i += (i + 1 < n && text[i + 1] == '[') ? 2 : 1;
            header_parts = key_parts("]");
            bound = std::max(bound, header_parts + 1);
            skip_line();
            continue;
        }
        const int parts = key_parts("=");
        if (i < n && text[i] == '=') ++i;
        // The value: inline arrays and tables may span lines.
        int depth = 0, deepest = 0;
        while (i < n) {
            const char c = text[i];
            if (c == '"' || c == '\'') {
                skip_string();
                continue;
            }
            if (c == '#') {
                skip_line();
                continue;
            }
            if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
            if (c == ']' || c == '}') depth = std::max(0, depth - 1);
            if (c == '\n' && depth == 0) break;
            ++i;
        }
        bound = std::max(bound, header_parts + parts + deepest);
    }
    return bound;
}

json toml_to_json(const toml::node& node) {
    if (auto t = node.as_table()) {
        json out = json::object();
        for (const auto& [k, v] : *t) out[std::string(k.str())] = toml_to_json(v);
        return out;
    }
    if (auto a = node.as_array()) {
        json out = json::array();
        for (const auto& v : *a) out.push_back(toml_to_json(v));
        return out;
    }
    if (auto v = node.as_string()) return json(v->get());
    if (auto v = node.as_integer()) return json(v->get());
    if (auto v = node.as_floating_point()) return json(v->get());
    if (auto v = node.as_boolean()) return json(v->get());
    throw Error("unsupported TOML value (dates and times are not used by hydra configs)");
}

}  // namespace

std::string read_file_limited(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
                              const std::string& hint) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    HYDRA_CHECK(fd >= 0, "{}: cannot open {}: {}{}", path.string(), what, std::strerror(errno),
                hint.empty() ? "" : " (" + hint + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: {} is not a regular file", path.string(), what);
    }
    if (uint64_t(st.st_size) > max_bytes) {
        ::close(fd);
        fail("{}: {} is larger than {} MiB ({} bytes); refusing to read it", path.string(), what,
             max_bytes >> 20, uint64_t(st.st_size));
    }
    std::string out;
    out.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
        const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += size_t(r);
    }
    ::close(fd);
    out.resize(got);  // a file that shrank while read; one that grew is cut at its size when opened
    return out;
}

json parse_json_bounded(std::string_view text, const std::string& source, int max_depth) {
    const json::parser_callback_t limit = [max_depth](int depth, json::parse_event_t event, json&) {
        if (depth > max_depth &&
            (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
            throw TooDeep{};
        return true;
    };
    try {
        return json::parse(text, limit);
    } catch (const TooDeep&) {
        fail("{}: nests deeper than {} levels (refused; hydra's files nest a few levels)", source, max_depth);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", source, e.what());
    }
}

std::optional<json> try_parse_json_bounded(std::string_view text, int max_depth) {
    try {
        return parse_json_bounded(text, "", max_depth);
    } catch (const Error&) {
        return std::nullopt;
    }
}

json parse_toml_bounded(const std::string& text, const std::string& source, int max_depth) {
    const int bound = toml_depth_bound(text);
    HYDRA_CHECK(bound <= max_depth,
                "{}: nests deeper than {} levels (refused; hydra's configs nest two levels)", source,
                max_depth);
    try {
        return toml_to_json(toml::parse(text, source));
    } catch (const toml::parse_error& e) {
        fail("{}: TOML error at line {}: {}", source, e.source().begin.line, e.description());
    } catch (const Error& e) {
        fail("{}: {}", source, e.what());
    }
}

}  // namespace hydra
