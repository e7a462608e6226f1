// Reading outside input without trusting its size or depth: whole-file reads with a size cap, and
// JSON / TOML parsing that refuses nesting beyond a limit before the deep value exists, so nothing
// downstream (copies, dumps, tree walks, destructors) can recurse once per level of a hostile file.
// JSON depth comes from nlohmann's parser callback; TOML depth from a scan of the text (table
// headers, dotted keys, inline arrays and tables) before toml++ builds its tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hydra {

// Our configs nest about five levels (a plan's layer lists); HF configs fewer.
inline constexpr int kMaxInputDepth = 64;
// config.json, state.json, training and pipeline configs are kilobytes.
inline constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;

// The whole file, refused when larger than `max_bytes`; errors name `path` and `what` (e.g.
// "the config file"). `hint` is added to the error when the file cannot be opened.
std::string read_file_limited(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what,
                              const std::string& hint = "");

// JSON text -> value; throws hydra::Error naming `source` for invalid JSON or nesting deeper than
// `max_depth` ("... nests deeper than 64 levels").
nlohmann::json parse_json_bounded(std::string_view text, const std::string& source,
                                  int max_depth = kMaxInputDepth);
// The same without throwing: nullopt for invalid or too deep text (log lines).
std::optional<nlohmann::json> try_parse_json_bounded(std::string_view text, int max_depth = kMaxInputDepth);

// TOML text -> the equivalent nested JSON object (tables become objects); throws like above.
// Dates and times are refused (no hydra config uses them).
nlohmann::json parse_toml_bounded(const std::string& text, const std::string& source,
                                  int max_depth = kMaxInputDepth);

}  // namespace hydra
