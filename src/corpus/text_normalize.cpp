// Text normalisation, the garbage test and document splitting (see text_normalize.h).
#include "corpus/text_normalize.h"

#include <cctype>
#include <cstdint>

namespace hydra {

namespace {

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not one.
size_t utf8_len(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0)
        n = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
        n = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((b(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b(i + k) & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

}  // namespace

std::string normalize_text(std::string_view text, bool is_code) {
    // 1. Valid UTF-8 without control characters; "\r\n" and lone '\r' become '\n'.
    std::string u;
    u.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c == '\r') {
            u += '\n';
            i += (i + 1 < text.size() && text[i + 1] == '\n') ? 2 : 1;
            continue;
        }
        if (c < 0x80) {
            if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
                u += char(c);
            else if (c == '\f' || c == '\v')
                u += '\n';
            ++i;
            continue;
        }
        const size_t n = utf8_len(text, i);
        if (n == 0) {  // Latin-1
            if (c >= 0xA0) {
                u += char(0xC0 | (c >> 6));
                u += char(0x80 | (c & 0x3F));
            }
            ++i;
            continue;
        }
        // C1 controls (U+0080..U+009F) are dropped like C0 ones.
        if (!(n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0))
            u.append(text.substr(i, n));
        i += n;
    }
    // 2. Lines: trailing whitespace removed; prose has inner runs of blanks collapsed and leading blanks
    // removed; at most one blank line in a row, none at the start or the end.
    std::string out;
    out.reserve(u.size());
    int pending_blank = 0;
    size_t b = 0;
    while (b < u.size()) {
        size_t e = u.find('\n', b);
        if (e == std::string::npos) e = u.size();
        std::string_view line(u.data() + b, e - b);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        if (line.empty()) {
            pending_blank = out.empty() ? 0 : 1;
        } else {
            if (!out.empty()) out += pending_blank ? "\n\n" : "\n";
            pending_blank = 0;
            if (is_code) {
                out.append(line);
            } else {
                bool space = true;  // drops leading blanks too
                for (char c : line) {
                    if (c == ' ' || c == '\t') {
                        if (!space) out += ' ';
                        space = true;
                    } else {
                        out += c;
                        space = false;
                    }
                }
            }
        }
        b = e + 1;
    }
    if (!out.empty()) out += '\n';
    return out;
}

bool looks_like_garbage(std::string_view raw, std::string_view text) {
    if (raw.find('\0') != std::string_view::npos) return true;
    int64_t letters = 0, visible = 0, lines = 0;
    for (char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == '\n') ++lines;
        if (c == ' ' || c == '\t' || c == '\n') continue;
        if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation: counted with its lead byte
        ++visible;
        if (std::isalpha(c) || c >= 0xC0) ++letters;
    }
    if (visible == 0) return true;
    if (letters * 2 < visible) return true;
    return int64_t(text.size()) > 400 * std::max<int64_t>(lines, 1);
}

std::vector<std::string> split_document(std::string_view text, size_t max_bytes) {
    std::vector<std::string> parts;
    auto push = [&](std::string_view p) {
        while (!p.empty() && p.front() == '\n') p.remove_prefix(1);
        while (!p.empty() && p.back() == '\n') p.remove_suffix(1);
        if (p.find_first_not_of(" \t\n") != std::string_view::npos) parts.emplace_back(std::string(p) + "\n");
    };
    size_t pos = 0;
    while (pos < text.size()) {
        if (max_bytes == 0 || text.size() - pos <= max_bytes) {
            push(text.substr(pos));
            break;
        }
        const std::string_view window = text.substr(pos, max_bytes);
        size_t cut = window.rfind("\n\n");
        if (cut == std::string_view::npos || cut < max_bytes / 2) cut = window.rfind('\n');
        if (cut == std::string_view::npos || cut < max_bytes / 2) {
            cut = max_bytes;
            while (cut > 0 && (static_cast<unsigned char>(text[pos + cut]) & 0xC0) == 0x80) --cut;
            if (cut == 0) cut = max_bytes;
        }
        push(text.substr(pos, cut));
        pos += cut;
    }
    return parts;
}

std::string dedup_key(std::string_view text) {
    std::string k;
    k.reserve(text.size());
    bool space = true;
    for (char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == ' ' || c == '\t' || c == '\n') {
            if (!space) k += ' ';
            space = true;
            continue;
        }
        k += char(std::tolower(c));
        space = false;
    }
    if (!k.empty() && k.back() == ' ') k.pop_back();
    return k;
}

}  // namespace hydra
