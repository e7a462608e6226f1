// Markup strippers (see markup.h). Line-oriented and regex-free: they run over ~1 GB of text.
#include "corpus/markup.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tokenizer/byte_unicode.h"

namespace hydra {

namespace {

// Lines of `text` (without their '\n').
std::vector<std::string_view> lines_of(std::string_view text) {
    std::vector<std::string_view> out;
    size_t b = 0;
    while (b < text.size()) {  // a final '\n' ends the last line; it does not start an empty one
        size_t e = text.find('\n', b);
        if (e == std::string_view::npos) e = text.size();
        std::string_view line = text.substr(b, e - b);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        out.push_back(line);
        if (e == text.size()) break;
        b = e + 1;
    }
    return out;
}

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// A line made of one repeated punctuation character (reST and info title underlines).
bool is_rule_line(std::string_view s) {
    s = trim(s);
    if (s.size() < 3) return false;
    const char c = s[0];
    if (std::isalnum(static_cast<unsigned char>(c)) || c == ' ') return false;
    for (char x : s)
        if (x != c) return false;
    return true;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return;  // not a character: dropped
    utf8_append(out, char32_t(cp));
}

// reST inline markup: roles (:func:`x` -> x), ``literal`` -> literal, `text <url>`_ -> text,
// |substitution| kept as its name.
std::string rst_inline(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        // A role prefix ":name:" directly before a backquote.
        if (s[i] == ':' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
            size_t j = i + 1;
            while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == ':' ||
                                    s[j] == '-' || s[j] == '_' || s[j] == '.'))
                ++j;
            if (j > i + 1 && j < s.size() && s[j] == '`' && s[j - 1] == ':') {
                i = j;
                continue;
            }
        }
        if (s[i] == '`') {
            const bool dbl = i + 1 < s.size() && s[i + 1] == '`';
            const size_t open = dbl ? 2 : 1;
            const size_t close = s.find(dbl ? "``" : "`", i + open);
            if (close != std::string_view::npos) {
                std::string_view inner = s.substr(i + open, close - i - open);
                if (!dbl) {
                    // `text <target>` -> text; a leading '~' or '!' in a role target is Sphinx syntax.
                    const size_t lt = inner.rfind(" <");
                    if (lt != std::string_view::npos && !inner.empty() && inner.back() == '>')
                        inner = inner.substr(0, lt);
                    if (!inner.empty() && (inner[0] == '~' || inner[0] == '!')) inner.remove_prefix(1);
                }
                out += inner;
                i = close + (dbl ? 2 : 1);
                while (i < s.size() && s[i] == '_') ++i;  // `link`_ and `anonymous`__
                continue;
            }
        }
        out += s[i++];
    }
    return out;
}

}  // namespace

std::string strip_rst(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    const std::vector<std::string_view> lines = lines_of(text);
    bool skipping_comment = false;  // inside a ".." comment or a directive's option block
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string_view line = lines[i];
        const std::string_view t = trim(line);
        if (skipping_comment) {
            // A comment's body is the indented block after it.
            if (t.empty() || line[0] == ' ' || line[0] == '\t') {
                if (t.empty()) skipping_comment = false;
                continue;
            }
            skipping_comment = false;
        }
        if (is_rule_line(line)) continue;  // title over/underlines, transitions
        if (starts_with(t, "..")) {
            const size_t dc = t.find("::");
            if (dc != std::string_view::npos && t.size() > 3 && t[2] == ' ' && t[3] != '_') {
                // A directive: keep its argument as text for titles / notes ("note", "warning", ...),
                // and the indented body that follows (code blocks, admonitions) as ordinary lines.
                std::string_view arg = trim(t.substr(dc + 2));
                if (!arg.empty()) out += rst_inline(arg), out += '\n';
                // Its option lines (":linenos:") follow directly, indented.
                while (i + 1 < lines.size() && starts_with(trim(lines[i + 1]), ":") &&
                       !trim(lines[i + 1]).empty() && (lines[i + 1][0] == ' ' || lines[i + 1][0] == '\t'))
                    ++i;
                continue;
            }
            skipping_comment = true;  // comment, target (".. _x:"), substitution definition
            continue;
        }
        std::string l = rst_inline(line);
        // A paragraph ending in "::" introduces a literal block: keep one ':'.
        if (l.size() >= 2 && l.compare(l.size() - 2, 2, "::") == 0) l.pop_back();
        out += l;
        out += '\n';
    }
    return out;
}

std::string strip_pod(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool in_begin = false;  // =begin html ... =end: formatter-specific
    for (std::string_view line : lines_of(text)) {
        if (!line.empty() && line[0] == '=') {
            const size_t sp = line.find(' ');
            const std::string_view cmd = line.substr(0, sp);
            const std::string_view arg = sp == std::string_view::npos ? "" : trim(line.substr(sp + 1));
            if (cmd == "=begin") in_begin = true;
            if (cmd == "=end") in_begin = false;
            if (starts_with(cmd, "=head") || cmd == "=item") {
                line = arg;
                if (line == "*" || line.empty()) continue;
            } else {
                continue;  // =pod =cut =over =back =for =encoding =begin =end
            }
        }
        if (in_begin) continue;
        // Formatting codes X<...>, X<< ... >>: keep the content; L<text|target> keeps text.
        std::string l;
        std::vector<std::pair<size_t, bool>> stack;  // (closing '>' count, is link) per open code
        std::string link_text;
        for (size_t i = 0; i < line.size(); ++i) {
            const char c = line[i];
            if (std::isupper(static_cast<unsigned char>(c)) && i + 1 < line.size() && line[i + 1] == '<' &&
                std::strchr("BICLFSEXZ", c)) {
                size_t n = 1;
                while (i + 1 + n < line.size() && line[i + 1 + n] == '<') ++n;
                if (n > 1) {  // X<< ... >>: needs whitespace after the brackets
                    if (i + 1 + n < line.size() && line[i + 1 + n] == ' ') ++n;
                }
                if (c == 'E') {  // entity: E<gt> E<lt> E<sol> E<verbar> E<NNN>
                    const size_t close = line.find('>', i + 2);
                    if (close != std::string_view::npos) {
                        const std::string_view name = line.substr(i + 2, close - i - 2);
                        if (name == "gt")
                            l += '>';
                        else if (name == "lt")
                            l += '<';
                        else if (name == "sol")
                            l += '/';
                        else if (name == "verbar")
                            l += '|';
                        else if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])))
                            append_utf8(l, uint32_t(std::strtoul(std::string(name).c_str(), nullptr, 0)));
                        i = close;
                        continue;
                    }
                }
                if (c == 'Z' || c == 'X') {  // zero-width / index entry: drop
                    const size_t close = line.find('>', i + 2);
                    if (close != std::string_view::npos) {
                        i = close;
                        continue;
                    }
                }
                stack.push_back({n > 1 ? std::min<size_t>(n, 2) : 1, c == 'L'});
                if (c == 'L') l += '\x01';  // mark where the link's text starts
                i += n;
                continue;
            }
            if (c == '>' && !stack.empty()) {
                const size_t need = stack.back().first;
                if (need == 1 || (i + 1 < line.size() && line[i + 1] == '>')) {
                    if (need > 1) {
                        while (!l.empty() && l.back() == ' ') l.pop_back();
                        while (i + 1 < line.size() && line[i + 1] == '>') ++i;
                    }
                    if (stack.back().second) {  // L<text|target>: keep text, or target without "|"
                        const size_t start = l.rfind('\x01');
                        std::string inner = l.substr(start + 1);
                        const size_t bar = inner.find('|');
                        if (bar != std::string::npos) inner = inner.substr(0, bar);
                        l.resize(start);
                        l += inner;
                    }
                    stack.pop_back();
                    continue;
                }
            }
            l += c;
        }
        std::erase(l, '\x01');
        out += l;
        out += '\n';
    }
    return out;
}

std::string strip_html(std::string_view text) {
    std::string out;
    out.reserve(text.size() / 2);
    static const char* const kBlock[] = {"p",          "div", "br", "h1",  "h2",    "h3", "h4",    "h5",
                                         "h6",         "li",  "tr", "pre", "dt",    "dd", "table", "section",
                                         "blockquote", "ul",  "ol", "dl",  "title", "td", "th"};
    static const std::array<std::pair<const char*, uint32_t>, 24> kEntities = {{
        {"amp", '&'},      {"lt", '<'},       {"gt", '>'},        {"quot", '"'},     {"apos", '\''},
        {"nbsp", ' '},     {"mdash", 0x2014}, {"ndash", 0x2013},  {"rsquo", 0x2019}, {"lsquo", 0x2018},
        {"ldquo", 0x201C}, {"rdquo", 0x201D}, {"hellip", 0x2026}, {"copy", 0xA9},    {"reg", 0xAE},
        {"trade", 0x2122}, {"para", 0xB6},    {"sect", 0xA7},     {"times", 0xD7},   {"rarr", 0x2192},
        {"larr", 0x2190},  {"bull", 0x2022},  {"middot", 0xB7},   {"shy", 0},
    }};
    size_t i = 0;
    auto lower_eq = [&](size_t pos, std::string_view word) {
        if (pos + word.size() > text.size()) return false;
        for (size_t k = 0; k < word.size(); ++k)
            if (std::tolower(static_cast<unsigned char>(text[pos + k])) != word[k]) return false;
        return true;
    };
    while (i < text.size()) {
        const char c = text[i];
        if (c == '<') {
            if (text.compare(i, 4, "<!--") == 0) {
                const size_t e = text.find("-->", i + 4);
                i = e == std::string_view::npos ? text.size() : e + 3;
                continue;
            }
            // Whole elements whose content is not text.
            bool skipped = false;
            for (std::string_view el : {"script", "style", "head"}) {
                if (lower_eq(i + 1, el)) {
                    const std::string close = "</" + std::string(el);
                    size_t e = i;
                    while (true) {
                        e = text.find("</", e + 1);
                        if (e == std::string_view::npos || lower_eq(e, close)) break;
                    }
                    const size_t gt = e == std::string_view::npos ? e : text.find('>', e);
                    i = gt == std::string_view::npos ? text.size() : gt + 1;
                    skipped = true;
                    break;
                }
            }
            if (skipped) continue;
            const size_t gt = text.find('>', i);
            if (gt == std::string_view::npos) break;
            std::string_view tag = text.substr(i + 1, gt - i - 1);
            if (!tag.empty() && tag[0] == '/') tag.remove_prefix(1);
            size_t n = 0;
            while (n < tag.size() && std::isalnum(static_cast<unsigned char>(tag[n]))) ++n;
            std::string name(tag.substr(0, n));
            for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
            for (const char* b : kBlock)
                if (name == b) {
                    out += '\n';
                    if (name == "p" || name[0] == 'h' || name == "pre" || name == "table") out += '\n';
                    break;
                }
            i = gt + 1;
            continue;
        }
        if (c == '&') {
            const size_t semi = text.find(';', i);
            if (semi != std::string_view::npos && semi - i <= 10) {
                const std::string_view ent = text.substr(i + 1, semi - i - 1);
                bool done = false;
                if (!ent.empty() && ent[0] == '#') {
                    const bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
                    const std::string digits(ent.substr(hex ? 2 : 1));
                    if (!digits.empty()) {
                        append_utf8(out, uint32_t(std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10)));
                        done = true;
                    }
                } else {
                    for (const auto& [nm, cp] : kEntities)
                        if (ent == nm) {
                            append_utf8(out, cp);
                            done = true;
                            break;
                        }
                }
                if (done) {
                    i = semi + 1;
                    continue;
                }
            }
        }
        out += c;
        ++i;
    }
    return out;
}

namespace {

// roff escapes in one line of text.
std::string roff_inline(std::string_view s) {
    static const std::array<std::pair<const char*, const char*>, 16> kNamed = {{
        {"em", "\xE2\x80\x94"},
        {"en", "\xE2\x80\x93"},
        {"aq", "'"},
        {"dq", "\""},
        {"bu", "\xE2\x80\xA2"},
        {"lq", "\xE2\x80\x9C"},
        {"rq", "\xE2\x80\x9D"},
        {"oq", "'"},
        {"cq", "'"},
        {"co", "\xC2\xA9"},
        {"mi", "-"},
        {"hy", "-"},
        {"ti", "~"},
        {"ha", "^"},
        {"rs", "\\"},
        {"ga", "`"},
    }};
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 >= s.size()) {
            out += s[i];
            continue;
        }
        const char e = s[++i];
        switch (e) {
            case 'f':  // font: \fB \fI \fR \fP \f(CW \f[...]
                if (i + 1 < s.size() && s[i + 1] == '(')
                    i += 3;
                else if (i + 1 < s.size() && s[i + 1] == '[') {
                    const size_t c = s.find(']', i);
                    i = c == std::string_view::npos ? s.size() : c;
                } else
                    ++i;
                break;
            case 's':  // size: \s0 \s+1 \s-1
                if (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-')) ++i;
                while (i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) ++i;
                break;
            case '-':
                out += '-';
                break;
            case 'e':
            case '\\':
                out += '\\';
                break;
            case ' ':
            case '~':
                out += ' ';
                break;
            case '&':
            case '|':
            case '^':
            case 'c':
            case ')':
                break;
            case '"':
                return out;  // comment to end of line
            case '(': {      // \(xx
                const std::string_view nm = s.substr(i + 1, 2);
                for (const auto& [k, v] : kNamed)
                    if (nm == k) {
                        out += v;
                        break;
                    }
                i += 2;
                break;
            }
            case '[': {  // \[xx]
                const size_t c = s.find(']', i);
                const std::string_view nm = s.substr(i + 1, c == std::string_view::npos ? 0 : c - i - 1);
                for (const auto& [k, v] : kNamed)
                    if (nm == k) {
                        out += v;
                        break;
                    }
                i = c == std::string_view::npos ? s.size() : c;
                break;
            }
            case '*': {  // string: \*(lq \*(rq \*x \*[name]
                if (i + 1 < s.size() && s[i + 1] == '(') {
                    const std::string_view nm = s.substr(i + 2, 2);
                    if (nm == "lq")
                        out += "\xE2\x80\x9C";
                    else if (nm == "rq")
                        out += "\xE2\x80\x9D";
                    else if (nm == "Tm")
                        out += "\xE2\x84\xA2";
                    i += 3;
                } else if (i + 1 < s.size() && s[i + 1] == '[') {
                    const size_t c = s.find(']', i);
                    i = c == std::string_view::npos ? s.size() : c;
                } else {
                    ++i;
                }
                break;
            }
            case 'n':
            case 'w':
            case 'h':
            case 'v':
            case 'k':
            case 'o':
            case 'z': {
                // register / width / motion escapes with an argument: skip it
                if (i + 1 < s.size() && (s[i + 1] == '\'' || s[i + 1] == '[' || s[i + 1] == '(')) {
                    const char open = s[i + 1];
                    const char close = open == '[' ? ']' : open;
                    if (open == '(')
                        i += 3;
                    else {
                        const size_t c = s.find(close, i + 2);
                        i = c == std::string_view::npos ? s.size() : c;
                    }
                } else {
                    ++i;
                }
                break;
            }
            default:
                out += e;
                break;
        }
    }
    return out;
}

// Macro arguments, with double quotes grouping words.
std::vector<std::string> roff_args(std::string_view s) {
    std::vector<std::string> args;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        if (i >= s.size()) break;
        std::string a;
        if (s[i] == '"') {
            ++i;
            while (i < s.size() && s[i] != '"') a += s[i++];
            ++i;
        } else {
            while (i < s.size() && s[i] != ' ' && s[i] != '\t') a += s[i++];
        }
        args.push_back(a);
    }
    return args;
}

}  // namespace

std::string strip_roff(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    bool in_table = false;
    bool in_macro_def = false;
    for (std::string_view line : lines_of(text)) {
        if (in_macro_def) {
            if (starts_with(line, "..")) in_macro_def = false;
            continue;
        }
        if (!line.empty() && (line[0] == '.' || line[0] == '\'')) {
            std::string_view rest = line.substr(1);
            while (!rest.empty() && (rest[0] == ' ' || rest[0] == '\t')) rest.remove_prefix(1);
            size_t n = 0;
            while (n < rest.size() && rest[n] != ' ' && rest[n] != '\t') ++n;
            const std::string_view m = rest.substr(0, n);
            const std::string_view arg = n < rest.size() ? rest.substr(n + 1) : std::string_view();
            if (m == "TS") in_table = true;
            if (m == "TE") in_table = false;
            if (m == "de" || m == "de1" || m == "am" || m == "ig") {
                in_macro_def = true;
                continue;
            }
            if (m == "SH" || m == "SS") {
                out += "\n";
                for (const std::string& a : roff_args(arg)) out += roff_inline(a) + ' ';
                out += "\n";
            } else if (m == "B" || m == "I" || m == "SM" || m == "SB") {
                std::string joined;
                for (const std::string& a : roff_args(arg)) joined += (joined.empty() ? "" : " ") + a;
                out += roff_inline(joined) + '\n';
            } else if (m.size() == 2 && std::strchr("BIR", m[0]) && std::strchr("BIR", m[1])) {
                // .BR .IR .RB ...: alternating fonts, arguments joined without spaces
                std::string joined;
                for (const std::string& a : roff_args(arg)) joined += a;
                out += roff_inline(joined) + '\n';
            } else if (m == "PP" || m == "LP" || m == "P" || m == "sp" || m == "br") {
                out += '\n';
            } else if (m == "IP" || m == "TP" || m == "TQ" || m == "HP") {
                out += '\n';
                const std::vector<std::string> a = roff_args(arg);
                if (m == "IP" && !a.empty()) out += roff_inline(a[0]) + ' ';
            } else if (m == "UR" || m == "MT") {
                // link target: dropped, the text follows
            }
            continue;  // .TH .nf .fi .RS .RE .in .ad .\" ... and unknown requests
        }
        if (in_table && (line.find("tab(") != std::string_view::npos ||
                         line.find_first_not_of("lcrnsLCRNS|. ") == std::string_view::npos))
            continue;  // tbl format lines
        std::string l = roff_inline(line);
        if (in_table) std::replace(l.begin(), l.end(), '\t', ' ');
        out += l;
        out += '\n';
    }
    return out;
}

std::string strip_info(std::string_view raw) {
    // makeinfo marks index entries and images with "\0\b[index\0\b]"-style brackets: dropped whole.
    std::string unmarked;
    unmarked.reserve(raw.size());
    for (size_t i = 0; i < raw.size();) {
        if (raw.compare(i, 3, std::string_view("\0\b[", 3)) == 0) {
            const size_t close = raw.find(std::string_view("\0\b]", 3), i + 3);
            if (close != std::string_view::npos) {
                i = close + 3;
                continue;
            }
        }
        unmarked += raw[i++];
    }
    const std::string_view text = unmarked;
    std::string out;
    out.reserve(text.size());
    bool after_sep = false, in_tag_table = false;
    for (std::string_view line : lines_of(text)) {
        if (!line.empty() && line[0] == '\x1f') {
            after_sep = true;
            continue;
        }
        if (after_sep) {
            after_sep = false;
            if (starts_with(line, "Tag Table:")) in_tag_table = true;
            if (starts_with(line, "End Tag Table")) in_tag_table = false;
            if (starts_with(line, "File: ") || starts_with(line, "Tag Table:") ||
                starts_with(line, "End Tag Table") || starts_with(line, "Local Variables:"))
                continue;
        }
        if (in_tag_table) continue;
        if (is_rule_line(line)) continue;
        if (line == "* Menu:") continue;
        out += line;
        out += '\n';
    }
    return out;
}

std::string strip_fortune(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::string_view line : lines_of(text)) {
        if (trim(line) == "%") {
            out += "\n\n";
            continue;
        }
        out += line;
        out += '\n';
    }
    return out;
}

std::string strip_wordnet(std::string_view text) {
    std::string out;
    for (std::string_view line : lines_of(text)) {
        if (line.size() < 20 || line[0] == ' ') continue;
        const size_t bar = line.find(" | ");
        if (bar == std::string_view::npos) continue;
        // offset lex_filenum ss_type w_cnt(hex) word lex_id [word lex_id ...] ...
        std::vector<std::string_view> f;
        size_t i = 0;
        const std::string_view head = line.substr(0, bar);
        while (i < head.size() && f.size() < 4 + 2 * 64) {
            const size_t e = std::min(head.find(' ', i), head.size());
            f.push_back(head.substr(i, e - i));
            i = e + 1;
        }
        if (f.size() < 6) continue;
        const unsigned long w_cnt = std::strtoul(std::string(f[3]).c_str(), nullptr, 16);
        std::string words;
        for (unsigned long w = 0; w < w_cnt && 4 + 2 * w < f.size(); ++w) {
            std::string word(f[4 + 2 * w]);
            const size_t paren = word.find('(');  // adjective markers: "big(a)"
            if (paren != std::string::npos) word.resize(paren);
            std::replace(word.begin(), word.end(), '_', ' ');
            if (!words.empty()) words += ", ";
            words += word;
        }
        std::string_view gloss = trim(line.substr(bar + 3));
        out += words;
        out += ": ";
        out += gloss;
        out += '\n';
    }
    return out;
}

std::string strip_markup(std::string_view text, TextFormat format) {
    switch (format) {
        case TextFormat::kRst:
            return strip_rst(text);
        case TextFormat::kPod:
            return strip_pod(text);
        case TextFormat::kHtml:
            return strip_html(text);
        case TextFormat::kRoff:
            return strip_roff(text);
        case TextFormat::kInfo:
            return strip_info(text);
        case TextFormat::kFortune:
            return strip_fortune(text);
        case TextFormat::kWordnet:
            return strip_wordnet(text);
        case TextFormat::kPlain:
        case TextFormat::kCode:
            break;
    }
    return std::string(text);
}

}  // namespace hydra
