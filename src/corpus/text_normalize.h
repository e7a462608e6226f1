// Plain text as the corpus stores it: valid UTF-8 (bytes that are not are read as Latin-1, the usual
// encoding of old man pages and sources), no control characters but '\n' and '\t', no trailing spaces,
// at most one blank line in a row; prose also has runs of spaces collapsed (code keeps indentation).
// Plus the garbage test and the size cap applied to every document.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hydra {

std::string normalize_text(std::string_view text, bool is_code);

// Binary or machine-generated content that would only teach noise: a NUL byte in the raw bytes, fewer
// than 50% letters among non-space characters (hex tables, base64), or a mean line length over 400
// (minified or one-line data). `text` is normalised.
bool looks_like_garbage(std::string_view raw, std::string_view text);

// `text` cut into parts of at most max_bytes, at blank lines where one lies in the second half of the
// window, else at a line break, else at a UTF-8 character boundary; each part then ends with one '\n'
// (so a part is at most max_bytes + 1 bytes). Whitespace-only parts are dropped.
std::vector<std::string> split_document(std::string_view text, size_t max_bytes);

// The text exact-duplicate detection compares: lower-case ASCII, every run of whitespace one space.
std::string dedup_key(std::string_view text);

}  // namespace hydra
