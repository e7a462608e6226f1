// Shared machinery of the task generators (see task_common.h).
#include "eval/task_common.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

namespace hydra {

PromptFormat parse_prompt_format(const std::string& s) {
    if (s == "auto") return PromptFormat::kAuto;
    if (s == "raw") return PromptFormat::kRaw;
    if (s == "chatml") return PromptFormat::kChatML;
    fail("unknown prompt format '{}' (expected auto, raw or chatml)", s);
}

PromptStyle parse_prompt_style(const std::string& s) {
    if (s == "ruler") return PromptStyle::kRuler;
    if (s == "compact") return PromptStyle::kCompact;
    fail("unknown prompt style '{}' (expected ruler or compact)", s);
}

bool TaskContext::chat() const {
    if (options.format == PromptFormat::kRaw) return false;
    if (options.format == PromptFormat::kChatML) {
        HYDRA_CHECK(text.im_start >= 0 && text.im_end >= 0,
                    "prompt format chatml needs <|im_start|> and <|im_end|> in the vocabulary ({})",
                    text.name());
        return true;
    }
    return text.chatml;
}

namespace {

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids) {
    out.insert(out.end(), ids.begin(), ids.end());
}

// Tokens in front of the user text.
std::vector<int32_t> head_tokens(const TaskContext& ctx) {
    const TextEncoder& enc = *ctx.text.encoder;
    std::vector<int32_t> out;
    if (ctx.text.bos_id >= 0) out.push_back(ctx.text.bos_id);
    if (ctx.chat()) {
        if (!ctx.text.default_system.empty()) {
            out.push_back(ctx.text.im_start);
            append(out, enc.encode("system\n" + ctx.text.default_system));
            out.push_back(ctx.text.im_end);
            append(out, enc.encode("\n"));
        }
        out.push_back(ctx.text.im_start);
        append(out, enc.encode("user\n"));
    }
    return out;
}

}  // namespace

std::vector<int32_t> encode_prompt(const TaskContext& ctx, const PromptText& p) {
    const TextEncoder& enc = *ctx.text.encoder;
    std::vector<int32_t> out = head_tokens(ctx);
    append(out, enc.encode(p.user));
    if (ctx.chat()) {
        out.push_back(ctx.text.im_end);
        append(out, enc.encode("\n"));
        out.push_back(ctx.text.im_start);
        append(out, enc.encode("assistant\n" + p.answer_prefix));
    } else {
        append(out, enc.encode(p.answer_prefix));
    }
    return out;
}

std::vector<std::pair<int64_t, int64_t>> needle_token_spans(const TaskContext& ctx, const PromptText& p,
                                                            int64_t* query_begin) {
    const TextEncoder& enc = *ctx.text.encoder;
    const int64_t base = int64_t(head_tokens(ctx).size());
    auto at = [&](size_t c) {
        return base + int64_t(enc.encode(std::string_view(p.user).substr(0, c)).size());
    };
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const auto& [b, e] : p.needle_chars) spans.emplace_back(at(b), at(e));
    if (query_begin) *query_begin = at(p.query_char);
    return spans;
}

FitResult fit_prompt(const TaskContext& ctx, const std::string& task, int64_t target, int64_t n_min,
                     const BuildFn& build, const std::vector<std::string>& pad_atoms) {
    auto length = [&](int64_t n, const std::string& pad) {
        return int64_t(encode_prompt(ctx, build(n, pad)).size());
    };
    const int64_t len0 = length(n_min, "");
    HYDRA_CHECK(
        len0 <= target,
        "{}: a {}-token prompt is too short for this task: its smallest prompt already has {} tokens in {}{}",
        task, target, len0, ctx.text.name(),
        ctx.options.style == PromptStyle::kRuler ? " (try --prompt-style compact or a longer length)" : "");
    // Bracket: estimate tokens per unit from a probe, then double until the prompt overflows.
    const int64_t probe = n_min + 16;
    const int64_t len_probe = length(probe, "");
    const double per_unit = std::max(1e-3, double(len_probe - len0) / 16.0);
    int64_t lo = n_min, hi = n_min + int64_t(double(target - len0) / per_unit * 1.2) + 16;
    if (len_probe <= target)
        lo = probe;
    else
        hi = probe;
    while (length(hi, "") <= target) {
        lo = hi;
        HYDRA_CHECK(hi < (int64_t(1) << 40), "{}: the prompt does not grow with the haystack", task);
        hi *= 2;
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (length(mid, "") <= target ? lo : hi) = mid;
    }
    // Fill the remainder with pad atoms; on a non-additive surprise step back one unit and retry.
    for (int attempt = 0; attempt < 8 && lo - attempt >= n_min; ++attempt) {
        const int64_t n = lo - attempt;
        FitResult r;
        r.n = n;
        r.text = build(n, "");
        r.tokens = encode_prompt(ctx, r.text);
        const int64_t rem = target - int64_t(r.tokens.size());
        if (rem == 0) return r;
        if (rem < 0) continue;
        std::vector<int64_t> cost(pad_atoms.size());
        for (size_t i = 0; i < pad_atoms.size(); ++i)
            cost[i] = length(n, pad_atoms[i]) - int64_t(r.tokens.size());
        // Fewest atoms summing to rem (coin change); ties go to the earlier atom.
        std::vector<int64_t> best(size_t(rem) + 1, INT64_MAX), pick(size_t(rem) + 1, -1);
        best[0] = 0;
        for (int64_t s = 1; s <= rem; ++s)
            for (size_t i = 0; i < cost.size(); ++i)
                if (cost[i] > 0 && cost[i] <= s && best[size_t(s - cost[i])] != INT64_MAX &&
                    best[size_t(s - cost[i])] + 1 < best[size_t(s)]) {
                    best[size_t(s)] = best[size_t(s - cost[i])] + 1;
                    pick[size_t(s)] = int64_t(i);
                }
        if (best[size_t(rem)] == INT64_MAX) continue;
        std::string pad;
        for (int64_t s = rem; s > 0; s -= cost[size_t(pick[size_t(s)])])
            pad += pad_atoms[size_t(pick[size_t(s)])];
        r.pad = pad;
        r.text = build(n, pad);
        r.tokens = encode_prompt(ctx, r.text);
        if (int64_t(r.tokens.size()) == target) return r;
    }
    fail("{}: could not hit exactly {} tokens with {} (closest haystack size {}); please report this", task,
         target, ctx.text.name(), lo);
}

std::vector<std::string> prose_pad_atoms() {
    return {" and", " the",  " of",      " a",     " to",      " in",
            " was", " very", " however", " said,", " indeed,", ","};
}
std::vector<std::string> noise_pad_atoms() {
    return {" The",  " grass", " is",  " green.", " sky", " blue.", " sun",    " yellow.",
            " Here", " we",    " go.", " There",  " and", " back",  " again.", "."};
}
std::vector<std::string> dot_pad_atoms() {
    return {" ...", " ..", " .", "."};
}

Rng task_rng(const std::string& task, int64_t length, uint64_t seed, int64_t index, uint64_t stream) {
    // FNV-1a over the task name, then splitmix-style mixing of the numbers.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : task) h = (h ^ c) * 1099511628211ull;
    auto mix = [&](uint64_t v) {
        h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    };
    mix(uint64_t(length));
    mix(seed);
    mix(uint64_t(index));
    mix(stream);
    return Rng(h);
}

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
    HYDRA_ASSERT(lo <= hi, "{} > {}", lo, hi);
    const uint64_t span = uint64_t(hi - lo) + 1;
    return lo + int64_t(span == 0 ? rng.next_u64() : rng.next_u64() % span);
}

std::string random_number(Rng& rng, int digits) {
    HYDRA_CHECK(digits >= 1 && digits <= 18, "number digits must be in 1..18 (got {})", digits);
    int64_t lo = 1;
    for (int i = 1; i < digits; ++i) lo *= 10;
    return std::to_string(uniform_int(rng, digits == 1 ? 0 : lo, lo * 10 - 1));
}

std::string random_uuid(Rng& rng) {
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 32; ++i) {
        int d = int(rng.next_u64() & 15);
        if (i == 12) d = 4;            // version 4
        if (i == 16) d = 8 + (d & 3);  // variant 10xx
        if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
        s += hex[d];
    }
    return s;
}

std::string random_letters(Rng& rng, int n, bool upper) {
    std::string s;
    for (int i = 0; i < n; ++i) s += char((upper ? 'A' : 'a') + uniform_int(rng, 0, 25));
    return s;
}

std::string random_word_key(Rng& rng, const TaskOptions& o) {
    const auto& adj = wordnet_words(WordClass::kAdjective, o.wordnet_dir);
    const auto& noun = wordnet_words(WordClass::kNoun, o.wordnet_dir);
    return adj[size_t(uniform_int(rng, 0, int64_t(adj.size()) - 1))] + "-" +
           noun[size_t(uniform_int(rng, 0, int64_t(noun.size()) - 1))];
}

namespace {
const std::vector<std::string>& noise_words() {
    static const std::vector<std::string> w = [] {
        std::vector<std::string> out;
        std::string cur;
        for (char c : noise_paragraph()) {
            if (c == ' ') {
                out.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
        out.push_back(cur);
        return out;
    }();
    return w;
}
}  // namespace

const std::string& WordFiller::word(int64_t i) const {
    if (noise) return noise_words()[size_t(i) % noise_words().size()];
    return (*prose)[size_t(offset + i) % prose->size()];
}

const char* WordFiller::sep(int64_t i) const {
    return noise && i % int64_t(noise_words().size()) == 0 ? "\n" : " ";
}

bool WordFiller::sentence_end(int64_t i) const {
    const std::string& w = word(i);
    size_t k = w.size();
    while (k > 0 && (w[k - 1] == '"' || w[k - 1] == '\'' || w[k - 1] == ')' || w[k - 1] == '_')) --k;
    return k > 0 && (w[k - 1] == '.' || w[k - 1] == '?' || w[k - 1] == '!');
}

int64_t WordFiller::boundary(int64_t n, double depth) const {
    const int64_t want = std::clamp<int64_t>(int64_t(std::llround(depth * double(n))), 0, n);
    for (int64_t d = 0; d <= 400; ++d) {
        for (int64_t b : {want - d, want + d})
            if (b >= 0 && b <= n && (b == 0 || b == n || sentence_end(b - 1))) return b;
    }
    return want;
}

WordFiller noise_filler() {
    return WordFiller{};
}

WordFiller prose_filler(const TaskOptions& o, Rng& rng) {
    WordFiller f;
    f.noise = false;
    f.prose = &prose_words(o.prose_dir);
    // A random sentence start, so samples see different prose (RULER reuses one prefix).
    const int64_t size = int64_t(f.prose->size());
    int64_t off = uniform_int(rng, 1, size - 1);
    for (int64_t k = 0; k < 2000; ++k) {
        f.offset = (off + k) % size;
        if (f.offset > 0 && f.sentence_end(-1)) break;
    }
    return f;
}

std::string render_filler(const WordFiller& f, int64_t n,
                          const std::vector<std::pair<int64_t, std::string>>& inserts, const std::string& pad,
                          size_t base, std::vector<std::pair<size_t, size_t>>* ranges) {
    std::string out;
    size_t next = 0;
    const char* insert_sep = f.noise ? "\n" : " ";
    auto put_inserts = [&](int64_t at) {
        while (next < inserts.size() && inserts[next].first == at) {
            const size_t b = out.size();
            if (!out.empty()) out += insert_sep;
            out += inserts[next].second;
            if (ranges) ranges->emplace_back(base + b, base + out.size());
            ++next;
        }
    };
    for (int64_t i = 0; i < n; ++i) {
        put_inserts(i);
        if (!out.empty()) out += (i == 0 ? insert_sep : f.sep(i));
        out += f.word(i);
    }
    put_inserts(n);
    HYDRA_ASSERT(next == inserts.size(), "inserts must be sorted with boundaries in [0, n]");
    out += pad;
    return out;
}

std::string join_and(const std::vector<std::string>& items) {
    if (items.empty()) return "";
    if (items.size() == 1) return items[0];
    if (items.size() == 2) return items[0] + " and " + items[1];
    std::string s;
    for (size_t i = 0; i + 1 < items.size(); ++i) s += items[i] + ", ";
    return s + "and " + items.back();
}

std::vector<int32_t> continuation_tokens(const TaskContext& ctx, const std::string& answer_prefix,
                                         const std::string& answer, bool prompt_ends_with_space) {
    const TextEncoder& enc = *ctx.text.encoder;
    const std::string seg = ctx.chat() ? "assistant\n" + answer_prefix : answer_prefix;
    const std::string head = prompt_ends_with_space ? seg + " " : seg;
    const std::vector<int32_t> a = enc.encode(head),
                               b = enc.encode(head + (prompt_ends_with_space ? "" : " ") + answer);
    HYDRA_CHECK(b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin()),
                "the answer '{}' merges with the end of the prompt in {}; cannot define its first token",
                answer, ctx.text.name());
    return {b.begin() + int64_t(a.size()), b.end()};
}

bool needs_trailing_space(const TaskContext& ctx, const std::string& answer) {
    const TextEncoder& enc = *ctx.text.encoder;
    const std::vector<int32_t> sp = enc.encode(" "), with = enc.encode(" " + answer);
    return sp.size() == 1 && with.size() > 1 && with[0] == sp[0];
}

}  // namespace hydra
