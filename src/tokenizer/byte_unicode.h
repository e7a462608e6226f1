// GPT-2 byte-level alphabet: every byte 0..255 maps to one printable code point (bytes_to_unicode),
// so a byte-level BPE vocabulary can spell arbitrary bytes as UTF-8 strings ("Ġ" = space, "Ċ" = \n).
// Also the small UTF-8 helpers the tokenizer needs (strict validation, decode one code point, append).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hydra {

// Code point that byte `b` is spelled with: bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves,
// the other 68 bytes (in increasing order) to U+0100 + n.
char32_t byte_to_unicode(uint8_t b);
// Inverse map; nullopt for a code point that spells no byte.
std::optional<uint8_t> unicode_to_byte(char32_t cp);
// UTF-8 of byte_to_unicode(b) (1 or 2 bytes), as stored in vocabularies.
const std::string& byte_to_token_string(uint8_t b);
// Byte-level spelling of raw bytes (each byte -> its code point, UTF-8 encoded).
std::string bytes_to_token_string(std::string_view raw);
// Raw bytes of a byte-level spelled string. A code point outside the alphabet is kept as its own UTF-8
// (as HF's ByteLevel decoder does). `s` must be valid UTF-8.
std::string token_string_to_bytes(std::string_view s);

// Offset of the first byte that breaks strict UTF-8 (overlongs, surrogates, > U+10FFFF, truncated
// sequences), or std::string_view::npos when `s` is valid.
size_t utf8_invalid_offset(std::string_view s);
inline bool is_valid_utf8(std::string_view s) {
    return utf8_invalid_offset(s) == std::string_view::npos;
}
// Decodes the code point at s[pos] (s must be valid UTF-8) and advances pos past it.
char32_t utf8_next(std::string_view s, size_t& pos);
void utf8_append(std::string& out, char32_t cp);

}  // namespace hydra
