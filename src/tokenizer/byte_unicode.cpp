// GPT-2 bytes_to_unicode both ways, and strict UTF-8 helpers (see byte_unicode.h).
#include "tokenizer/byte_unicode.h"

#include <array>

namespace hydra {
namespace {

bool maps_to_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

struct ByteTables {
    std::array<char32_t, 256> to_cp{};
    std::array<int16_t, 0x144> from_cp{};  // every mapped code point is < U+0144
    std::array<std::string, 256> spelled;
    ByteTables() {
        from_cp.fill(-1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            to_cp[b] = maps_to_itself(b) ? char32_t(b) : char32_t(0x100 + n++);
            from_cp[to_cp[b]] = int16_t(b);
            utf8_append(spelled[b], to_cp[b]);
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) {
    return tables().to_cp[b];
}

std::optional<uint8_t> unicode_to_byte(char32_t cp) {
    if (cp >= tables().from_cp.size() || tables().from_cp[cp] < 0) return std::nullopt;
    return uint8_t(tables().from_cp[cp]);
}

const std::string& byte_to_token_string(uint8_t b) {
    return tables().spelled[b];
}

std::string bytes_to_token_string(std::string_view raw) {
    std::string out;
    out.reserve(raw.size() * 2);
    for (unsigned char c : raw) out += tables().spelled[c];
    return out;
}

std::string token_string_to_bytes(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        const char32_t cp = utf8_next(s, pos);
        if (auto b = unicode_to_byte(cp)) {
            out += char(*b);
        } else {
            out.append(s.substr(start, pos - start));
        }
    }
    return out;
}

size_t utf8_invalid_offset(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const unsigned c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;  // overlong
            if (c == 0xED) hi = 0x9F;  // surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;  // overlong
            if (c == 0xF4) hi = 0x8F;  // > U+10FFFF
        } else {
            return i;
        }
        if (i + len > n) return i;
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (size_t k = 2; k < len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return std::string_view::npos;
}

char32_t utf8_next(std::string_view s, size_t& pos) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const unsigned c = p[pos];
    if (c < 0x80) {
        pos += 1;
        return c;
    }
    if (c < 0xE0) {
        const char32_t cp = ((c & 0x1F) << 6) | (p[pos + 1] & 0x3F);
        pos += 2;
        return cp;
    }
    if (c < 0xF0) {
        const char32_t cp = ((c & 0x0F) << 12) | ((p[pos + 1] & 0x3F) << 6) | (p[pos + 2] & 0x3F);
        pos += 3;
        return cp;
    }
    const char32_t cp =
        ((c & 0x07) << 18) | ((p[pos + 1] & 0x3F) << 12) | ((p[pos + 2] & 0x3F) << 6) | (p[pos + 3] & 0x3F);
    pos += 4;
    return cp;
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

}  // namespace hydra
