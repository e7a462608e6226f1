// NIAH generators and their patching pairs (see niah.h). A sample is described by a NiahSpec (keys,
// values, depths, query) drawn once from the sample's Rng; render() turns it into text for any
// haystack size, so the exact-length search and the pair corruptions re-render the same draws.
#include "eval/niah.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/ranges.h>

#include "core/error.h"

namespace hydra {

namespace {

struct NiahSpec {
    std::vector<std::string> keys;                 // max(k, q) distinct keys
    std::vector<std::vector<std::string>> values;  // per key
    std::vector<std::pair<int, int>> order;        // needles as (key, value) in insertion order
    std::vector<double> depths;                    // one per needle, sorted
    std::vector<int> query;                        // queried key indices
    WordFiller filler;
    Rng distractor_seed{0};            // kNeedles: line i uses a stream derived from this
    std::string answer_prefix_suffix;  // "" or " " (pairs: prompt ends with the space)
    std::string query_override;        // key-swap: the key the question names instead
    std::shared_ptr<std::vector<int64_t>>
        key_perm;  // mqar: distractor keys (noun indices), real keys excluded
};

class NiahTask final : public TaskGenerator {
  public:
    NiahTask(NiahConfig c, std::shared_ptr<const TaskContext> ctx) : c_(std::move(c)), ctx_(std::move(ctx)) {}
    std::string name() const override { return c_.name; }
    bool has_pairs() const override {
        return c_.variant == NiahConfig::kMqar || (c_.queries == 1 && c_.values == 1);
    }
    std::vector<std::string> corruptions() const override {
        if (!has_pairs()) return {};
        if (c_.variant == NiahConfig::kMqar) return {"key-swap", "value-swap"};
        if (c_.keys > 1 || c_.haystack == NiahConfig::kNeedles)
            return {"key-swap", "value-swap", "needle-removed"};
        return {"value-swap", "needle-removed"};
    }

    TaskSample sample(int64_t length, uint64_t seed, int64_t index) const override {
        Rng rng = task_rng(c_.name, length, seed, index);
        NiahSpec spec = draw(rng, length, seed, index);
        FitResult fit = fit_spec(spec, length);
        TaskSample s;
        s.task = c_.name;
        s.target_length = length;
        s.prompt = fit.tokens;
        for (int q : spec.query)
            for (const std::string& v : spec.values[size_t(q)]) s.answers.push_back(v);
        s.metric = "all";
        s.max_new_tokens = c_.variant == NiahConfig::kRuler     ? 128
                           : c_.variant == NiahConfig::kPasskey ? 16
                                                                : 48;
        s.needle_spans = needle_token_spans(*ctx_, fit.text, &s.query_begin);
        s.seed = seed;
        s.index = index;
        s.answer_prefix = fit.text.answer_prefix;
        return s;
    }

    PatchingPair pair(int64_t length, uint64_t seed, int64_t index,
                      const std::string& corruption) const override {
        HYDRA_CHECK(has_pairs(), "task '{}' has no clean/corrupted pairs", c_.name);
        const auto ok = corruptions();
        HYDRA_CHECK(std::find(ok.begin(), ok.end(), corruption) != ok.end(),
                    "task '{}' has no corruption '{}' (available: {})", c_.name, corruption,
                    fmt::join(ok, ", "));
        // A sample whose draws do not allow the corruption (no equal-length key, say) is redrawn
        // from a further stream of the same (seed, index): still deterministic.
        for (uint64_t attempt = 0; attempt < 16; ++attempt) {
            Rng rng = task_rng(c_.name + "/pair", length, seed, index, attempt);
            NiahSpec spec = draw(rng, length, seed, index);
            if (auto p = try_pair(spec, rng, length, corruption)) return *p;
        }
        fail("{}: no {} pair found for length {} seed {} index {}", c_.name, corruption, length, seed, index);
    }

  private:
    std::string vtype(bool plural) const {
        return std::string(c_.uuid_values ? "uuid" : "number") + (plural ? "s" : "");
    }
    const std::vector<std::string>& nouns() const {
        return wordnet_words(WordClass::kNoun, ctx_->options.wordnet_dir);
    }
    std::string draw_key(Rng& rng) const {
        if (c_.variant == NiahConfig::kPasskey) return "the pass key";
        if (c_.variant == NiahConfig::kMqar)
            return nouns()[size_t(uniform_int(rng, 0, int64_t(nouns().size()) - 1))];
        return c_.uuid_keys ? random_uuid(rng) : random_word_key(rng, ctx_->options);
    }
    std::string draw_value(Rng& rng) const {
        if (c_.variant == NiahConfig::kPasskey) return random_number(rng, ctx_->options.passkey_digits);
        if (c_.variant == NiahConfig::kMqar) return random_number(rng, ctx_->options.mqar_value_digits);
        return c_.uuid_values ? random_uuid(rng) : random_number(rng, ctx_->options.number_digits);
    }
    std::string needle(const std::string& key, const std::string& value) const {
        if (c_.variant == NiahConfig::kPasskey)
            return "The pass key is " + value + ". Remember it. " + value + " is the pass key.";
        if (c_.variant == NiahConfig::kMqar) return key + ": " + value;
        if (ctx_->options.style == PromptStyle::kCompact)
            return "The magic " + vtype(false) + " for " + key + " is " + value + ".";
        return "One of the special magic " + vtype(true) + " for " + key + " is: " + value + ".";
    }

    NiahSpec draw(Rng& rng, int64_t length, uint64_t seed, int64_t index) const {
        NiahSpec s;
        const int nq = c_.variant == NiahConfig::kMqar ? ctx_->options.mqar_queries : c_.queries;
        HYDRA_CHECK(nq >= 1 && nq <= 64, "{}: the number of queries must be in 1..64 (got {})", c_.name, nq);
        const int nk = std::max(c_.keys, nq);
        while (int(s.keys.size()) < nk) {
            std::string k = draw_key(rng);
            if (std::find(s.keys.begin(), s.keys.end(), k) == s.keys.end()) s.keys.push_back(k);
        }
        for (int k = 0; k < nk; ++k) {
            s.values.emplace_back();
            for (int v = 0; v < c_.values; ++v) s.values.back().push_back(draw_value(rng));
            for (int v = 0; v < c_.values; ++v) s.order.emplace_back(k, v);
        }
        shuffle(s.order, rng);
        // Distinct depths: RULER's 40-point grid for prose, uniform positions otherwise.
        std::vector<double> grid;
        for (int i = 0; i < 40; ++i) grid.push_back(double(i) / 39.0);
        shuffle(grid, rng);
        for (size_t i = 0; i < s.order.size(); ++i)
            s.depths.push_back(c_.haystack == NiahConfig::kEssay ? grid[i] : rng.uniform());
        std::sort(s.depths.begin(), s.depths.end());
        std::vector<int> ks(static_cast<size_t>(nk));
        for (int i = 0; i < nk; ++i) ks[size_t(i)] = i;
        shuffle(ks, rng);
        s.query.assign(ks.begin(), ks.begin() + nq);
        std::sort(s.query.begin(), s.query.end());
        s.filler = c_.haystack == NiahConfig::kEssay ? prose_filler(ctx_->options, rng) : noise_filler();
        s.distractor_seed = task_rng(c_.name + "/distractors", length, seed, index);
        if (c_.variant == NiahConfig::kMqar) {
            auto perm = std::make_shared<std::vector<int64_t>>();
            for (int64_t i = 0; i < int64_t(nouns().size()); ++i)
                if (std::find(s.keys.begin(), s.keys.end(), nouns()[size_t(i)]) == s.keys.end())
                    perm->push_back(i);
            Rng pr = s.distractor_seed;
            shuffle(*perm, pr);
            s.key_perm = perm;
        }
        return s;
    }

    // Distractor line i of a needle haystack (same key/value types as the real needle).
    std::pair<std::string, std::string> distractor(const NiahSpec& s, int64_t i) const {
        Rng r = s.distractor_seed;
        r.reseed(r.next_u64() ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull));
        if (c_.variant == NiahConfig::kMqar) {
            // Distinct keys: the sample's permutation of the noun list, after the real keys.
            HYDRA_CHECK(size_t(i) < s.key_perm->size(),
                        "mqar: more pairs ({}) than distinct keys in the WordNet noun list ({}); use a "
                        "shorter length",
                        i, s.key_perm->size());
            return {nouns()[size_t((*s.key_perm)[size_t(i)])], draw_value(r)};
        }
        std::string k = draw_key(r);
        return {k, draw_value(r)};
    }

    PromptText render(const NiahSpec& s, int64_t n, const std::string& pad) const {
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        const bool single = s.query.size() * size_t(c_.values) == 1;
        if (c_.variant != NiahConfig::kRuler) return render_variant(s, n, pad);
        std::vector<std::string> qkeys;
        for (int q : s.query) qkeys.push_back(s.keys[size_t(q)]);
        if (!s.query_override.empty()) qkeys = {s.query_override};
        const std::string query = join_and(qkeys);
        PromptText p;
        if (compact)
            p.user = "Remember the magic " + vtype(!single) + ".\n";
        else if (single)
            p.user = "A special magic " + vtype(false) +
                     " is hidden in the text below. Memorize it; I will ask you about it afterwards.\n";
        else
            p.user = "Some special magic " + vtype(true) +
                     " are hidden in the text below. Memorize them; I will ask you about them afterwards.\n";
        std::vector<std::pair<int64_t, std::string>> inserts;
        if (c_.haystack == NiahConfig::kNeedles) {
            // Lines: n distractors, the real needles at their depths, '\n' between lines; pad words end
            // the last line.
            std::string ctx;
            size_t next = 0;
            for (int64_t i = 0; i <= n; ++i) {
                while (next < s.order.size() && int64_t(s.depths[next] * double(n) + 0.5) == i) {
                    const auto [k, v] = s.order[next++];
                    const size_t b = p.user.size() + ctx.size();
                    if (!ctx.empty()) ctx += "\n";
                    ctx += needle(s.keys[size_t(k)], s.values[size_t(k)][size_t(v)]);
                    p.needle_chars.emplace_back(b, p.user.size() + ctx.size());
                }
                if (i == n) break;
                auto [dk, dv] = distractor(s, i);
                if (std::find(s.keys.begin(), s.keys.end(), dk) != s.keys.end())
                    dk = "x" + dk;  // never a real key
                if (!ctx.empty()) ctx += "\n";
                ctx += needle(dk, dv);
            }
            p.user += ctx + pad;
        } else {
            for (size_t i = 0; i < s.order.size(); ++i) {
                const auto [k, v] = s.order[i];
                inserts.emplace_back(s.filler.boundary(n, s.depths[i]),
                                     needle(s.keys[size_t(k)], s.values[size_t(k)][size_t(v)]));
            }
            std::stable_sort(inserts.begin(), inserts.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
            p.user += render_filler(s.filler, n, inserts, pad, p.user.size(), &p.needle_chars);
        }
        p.query_char = p.user.size();
        if (compact) {
            p.user += "\nWhat is the magic " + vtype(!single) + " for " + query + "?";
            p.answer_prefix = " The magic " + vtype(!single) + " for " + query + (single ? " is" : " are");
        } else if (single) {
            p.user += "\nWhat is the special magic " + vtype(false) + " for " + query +
                      " mentioned in the text above?";
            p.answer_prefix =
                " The special magic " + vtype(false) + " for " + query + " mentioned in the text above is";
        } else {
            p.user += "\nWhat are all the special magic " + vtype(true) + " for " + query +
                      " mentioned in the text above?";
            p.answer_prefix =
                " The special magic " + vtype(true) + " for " + query + " mentioned in the text above are";
        }
        p.answer_prefix += s.answer_prefix_suffix;
        return p;
    }

    // Passkey and MQAR prompts (their own wording; same haystack machinery).
    PromptText render_variant(const NiahSpec& s, int64_t n, const std::string& pad) const {
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        PromptText p;
        std::vector<std::string> qkeys;
        for (int q : s.query) qkeys.push_back(s.keys[size_t(q)]);
        if (!s.query_override.empty()) qkeys = {s.query_override};
        if (c_.variant == NiahConfig::kPasskey) {
            p.user = compact ? "Find the pass key.\n"
                             : "There is an important piece of information hidden inside a lot of irrelevant "
                               "text. Find it "
                               "and memorize it; I will ask you about it.\n";
            std::vector<std::pair<int64_t, std::string>> inserts = {
                {s.filler.boundary(n, s.depths[0]), needle("", s.values[0][0])}};
            p.user += render_filler(s.filler, n, inserts, pad, p.user.size(), &p.needle_chars);
            p.query_char = p.user.size();
            p.user += "\nWhat is the pass key?";
            p.answer_prefix = " The pass key is";
        } else {
            p.user = compact ? "Key-value pairs:\n"
                             : "Below is a list of keys, each with a value. Memorize them; I will ask for "
                               "the values of "
                               "some keys afterwards.\n";
            // Lines: n distractor pairs with the queried pairs at their depths.
            std::string list;
            size_t next = 0;
            for (int64_t i = 0; i <= n; ++i) {
                while (next < s.order.size() && int64_t(s.depths[next] * double(n) + 0.5) == i) {
                    const auto [k, v] = s.order[next++];
                    const size_t b = p.user.size() + list.size();
                    if (!list.empty()) list += "\n";
                    list += needle(s.keys[size_t(k)], s.values[size_t(k)][size_t(v)]);
                    p.needle_chars.emplace_back(b, p.user.size() + list.size());
                }
                if (i == n) break;
                const auto [dk, dv] = distractor(s, i);
                if (!list.empty()) list += "\n";
                list += needle(dk, dv);
            }
            p.user += list + pad;
            p.query_char = p.user.size();
            if (qkeys.size() == 1) {
                p.user += "\nWhat is the value of " + qkeys[0] + "?";
                p.answer_prefix = " The value of " + qkeys[0] + " is";
            } else {
                p.user += "\nWhat are the values of " + join_and(qkeys) + "?";
                p.answer_prefix = " The values of " + join_and(qkeys) + " are";
            }
        }
        p.answer_prefix += s.answer_prefix_suffix;
        return p;
    }

    FitResult fit_spec(const NiahSpec& spec, int64_t length) const {
        const auto atoms = c_.haystack == NiahConfig::kEssay ? prose_pad_atoms()
                           : c_.variant == NiahConfig::kMqar ? dot_pad_atoms()
                                                             : noise_pad_atoms();
        return fit_prompt(
            *ctx_, c_.name, length, 0,
            [&](int64_t n, const std::string& pad) { return render(spec, n, pad); }, atoms);
    }

    // Filler tokens of exactly `count` tokens (for needle-removed), from the pad atoms.
    std::optional<std::vector<int32_t>> filler_tokens(int64_t count) const {
        const TextEncoder& enc = *ctx_->text.encoder;
        const auto atoms = c_.haystack == NiahConfig::kEssay ? prose_pad_atoms() : noise_pad_atoms();
        // Greedy over atoms in a cycle, then top up with the cheapest atom; verified by encoding.
        std::string text;
        for (size_t i = 0; int64_t(enc.encode(text).size()) < count; ++i) {
            const std::string cand = text + atoms[i % atoms.size()];
            if (int64_t(enc.encode(cand).size()) <= count)
                text = cand;
            else if (i > atoms.size() * 4)
                break;
        }
        std::vector<int32_t> ids = enc.encode(text);
        if (int64_t(ids.size()) != count) return std::nullopt;
        return ids;
    }

    std::optional<PatchingPair> try_pair(NiahSpec spec, Rng& rng, int64_t length,
                                         const std::string& corruption) const {
        spec.query.resize(1);  // pairs ask for one value (MQAR asks for several in samples)
        const int q = spec.query[0];
        const std::string answer = spec.values[size_t(q)][0];
        spec.answer_prefix_suffix = needs_trailing_space(*ctx_, answer) ? " " : "";
        const FitResult clean = fit_spec(spec, length);
        const PromptText ct = clean.text;
        PatchingPair pp;
        pp.task = c_.name;
        pp.corruption = corruption;
        pp.clean = clean.tokens;
        pp.needle_spans = needle_token_spans(*ctx_, ct, &pp.query_begin);
        pp.clean_answer = answer;
        const bool sp = !spec.answer_prefix_suffix.empty();
        const auto first = [&](const PromptText& p, const std::string& a) {
            return continuation_tokens(
                *ctx_, p.answer_prefix.substr(0, p.answer_prefix.size() - (sp ? 1 : 0)), a, sp)[0];
        };
        pp.answer_token = first(ct, answer);
        const TextEncoder& enc = *ctx_->text.encoder;
        if (corruption == "value-swap" || corruption == "needle-removed") {
            for (int tries = 0; tries < 64; ++tries) {
                const std::string other = draw_value(rng);
                if (other == answer || enc.encode(" " + other).size() != enc.encode(" " + answer).size())
                    continue;
                if (needs_trailing_space(*ctx_, other) != sp) continue;  // same split of the leading space
                const int32_t d = first(ct, other);
                if (d == pp.answer_token) continue;
                pp.distractor_token = d;
                pp.corrupted_answer = other;
                if (corruption == "value-swap") {
                    NiahSpec cs = spec;
                    cs.values[size_t(q)][0] = other;
                    pp.corrupted = encode_prompt(*ctx_, render(cs, clean.n, clean.pad));
                } else {
                    // The queried needle's tokens replaced by filler tokens of the same count.
                    size_t which = 0;
                    for (size_t i = 0; i < spec.order.size(); ++i)
                        if (spec.order[i].first == q) which = i;
                    const auto [b, e] = pp.needle_spans[which];
                    auto fill = filler_tokens(e - b);
                    if (!fill) return std::nullopt;
                    pp.corrupted = pp.clean;
                    std::copy(fill->begin(), fill->end(), pp.corrupted.begin() + b);
                }
                break;
            }
        } else {  // key-swap: the question names another needle's key (same token count)
            std::vector<std::pair<std::string, std::string>> cands;
            for (size_t k = 0; k < spec.keys.size(); ++k)
                if (int(k) != q) cands.emplace_back(spec.keys[k], spec.values[k][0]);
            if (c_.haystack == NiahConfig::kNeedles && c_.variant == NiahConfig::kRuler)
                for (int64_t i = 0; i < std::min<int64_t>(clean.n, 400); ++i)
                    cands.push_back(distractor(spec, i));
            for (const auto& [k, v] : cands) {
                if (enc.encode(" " + k).size() != enc.encode(" " + spec.keys[size_t(q)]).size()) continue;
                if (needs_trailing_space(*ctx_, v) != sp) continue;
                const int32_t d = first(ct, v);
                if (d == pp.answer_token) continue;
                NiahSpec cs = spec;
                cs.query_override = k;
                std::vector<int32_t> cor = encode_prompt(*ctx_, render(cs, clean.n, clean.pad));
                if (cor.size() != pp.clean.size()) continue;
                pp.corrupted = std::move(cor);
                pp.distractor_token = d;
                pp.corrupted_answer = v;
                break;
            }
        }
        if (pp.corrupted.size() != pp.clean.size() || pp.distractor_token < 0) return std::nullopt;
        return pp;
    }

    NiahConfig c_;
    std::shared_ptr<const TaskContext> ctx_;
};

}  // namespace

NiahConfig niah_config(const std::string& name) {
    using H = NiahConfig;
    static const std::map<std::string, NiahConfig> table = {
        {"niah_single_1", {"niah_single_1", H::kNoise, false, false, 1, 1, 1}},
        {"niah_single_2", {"niah_single_2", H::kEssay, false, false, 1, 1, 1}},
        {"niah_single_3", {"niah_single_3", H::kEssay, false, true, 1, 1, 1}},
        {"niah_multikey_1", {"niah_multikey_1", H::kEssay, false, false, 4, 1, 1}},
        {"niah_multikey_2", {"niah_multikey_2", H::kNeedles, false, false, 1, 1, 1}},
        {"niah_multikey_3", {"niah_multikey_3", H::kNeedles, true, true, 1, 1, 1}},
        {"niah_multivalue", {"niah_multivalue", H::kEssay, false, false, 1, 4, 1}},
        {"niah_multiquery", {"niah_multiquery", H::kEssay, false, false, 4, 1, 4}},
        {"passkey", {"passkey", H::kNoise, false, false, 1, 1, 1, NiahConfig::kPasskey}},
        {"mqar", {"mqar", H::kNeedles, false, false, 4, 1, 4, NiahConfig::kMqar}},
    };
    auto it = table.find(name);
    HYDRA_CHECK(it != table.end(), "unknown NIAH task '{}'", name);
    return it->second;
}

std::unique_ptr<TaskGenerator> make_niah_task(const NiahConfig& config,
                                              std::shared_ptr<const TaskContext> ctx) {
    return std::make_unique<NiahTask>(config, std::move(ctx));
}

}  // namespace hydra
