// Loaders and caches for the task text sources (see text_sources.h).
#include "eval/text_sources.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;  // guards every cache below; loads are rare and short

bool lower_alpha(const std::string& w, size_t lo, size_t hi) {
    if (w.size() < lo || w.size() > hi) return false;
    for (char c : w)
        if (c < 'a' || c > 'z') return false;
    return true;
}

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return {};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

const std::string& noise_paragraph() {
    static const std::string text =
        "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
    return text;
}

std::string default_prose_dir() {
    if (const char* c = std::getenv("HYDRA_CACHE"); c && *c) return (fs::path(c) / "prose").string();
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/prose";
}

std::string default_wordnet_dir() {
    if (const char* c = std::getenv("HYDRA_WORDNET_DIR"); c && *c) return c;
    return "/usr/share/wordnet";
}

std::string default_dictionary_path() {
    if (const char* c = std::getenv("HYDRA_DICT"); c && *c) return c;
    return "/usr/share/dict/words";
}

const std::vector<std::string>& prose_words(const std::string& dir) {
    static std::map<std::string, std::vector<std::string>> cache;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = cache.find(dir); it != cache.end()) return it->second;
    static const char* kBooks[] = {"austen_emma.txt",
                                   "austen_prideprejudice.txt",
                                   "austen_persuasion.txt",
                                   "austen_sensesensibility.txt",
                                   "austen_mansfieldpark.txt",
                                   "austen_northangerabbey.txt",
                                   "mobydick.txt"};
    std::vector<std::string> words;
    for (const char* book : kBooks) {
        const fs::path p = fs::path(dir) / book;
        HYDRA_CHECK(fs::exists(p),
                    "{}: missing haystack prose (run tools/fetch_prose.py, or tools/setup.sh, to fill {})",
                    p.string(), dir);
        const std::string text = read_all(p);
        std::istringstream in(text);
        std::string w;
        std::vector<std::string> book_words;
        while (in >> w) book_words.push_back(w);
        // Skip the title page / table of contents: start after the first "CHAPTER" heading's line
        // when there is one in the first 2% of the book (Austen), else at the start.
        size_t start = 0;
        for (size_t i = 0; i < book_words.size() / 50; ++i)
            if (book_words[i] == "CHAPTER" || book_words[i] == "Chapter") {
                start = std::min(book_words.size(), i + 2);
                break;
            }
        words.insert(words.end(), book_words.begin() + int64_t(start), book_words.end());
    }
    HYDRA_CHECK(words.size() > 10000, "{}: the prose cache holds only {} words (re-run tools/fetch_prose.py)",
                dir, words.size());
    return cache.emplace(dir, std::move(words)).first->second;
}

const std::vector<std::string>& wordnet_words(WordClass cls, const std::string& dir) {
    static std::map<std::pair<int, std::string>, std::vector<std::string>> cache;
    std::lock_guard<std::mutex> lock(g_mutex);
    const auto key = std::make_pair(int(cls), dir);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const char* file = cls == WordClass::kNoun        ? "index.noun"
                       : cls == WordClass::kAdjective ? "index.adj"
                                                      : "index.verb";
    const fs::path p = fs::path(dir) / file;
    HYDRA_CHECK(fs::exists(p),
                "{}: missing WordNet word list (install the Debian package wordnet-base: apt-get install "
                "wordnet-base; "
                "tools/setup.sh does it)",
                p.string());
    std::istringstream in(read_all(p));
    std::vector<std::string> words;
    std::string line;
    // index.* line: lemma pos synset_cnt p_cnt [ptr_symbol x p_cnt] sense_cnt tagsense_cnt offsets...
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == ' ') continue;  // license header lines start with spaces
        std::istringstream ls(line);
        std::string lemma, pos;
        int64_t synsets = 0, pointers = 0;
        if (!(ls >> lemma >> pos >> synsets >> pointers)) continue;
        std::string skip;
        for (int64_t i = 0; i < pointers; ++i) ls >> skip;
        int64_t senses = 0, tagged = 0;
        if (!(ls >> senses >> tagged)) continue;
        if (tagged > 0 && lower_alpha(lemma, 3, 10)) words.push_back(lemma);
    }
    HYDRA_CHECK(words.size() >= 500, "{}: only {} usable words (expected WordNet 3.0 from wordnet-base)",
                p.string(), words.size());
    return cache.emplace(key, std::move(words)).first->second;
}

const std::vector<std::string>& dictionary_words(const std::string& path) {
    static std::map<std::string, std::vector<std::string>> cache;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = cache.find(path); it != cache.end()) return it->second;
    HYDRA_CHECK(fs::exists(path),
                "{}: missing word list (install the Debian package wamerican: apt-get install wamerican; "
                "tools/setup.sh does it)",
                path);
    std::istringstream in(read_all(path));
    std::vector<std::string> words;
    std::string w;
    while (std::getline(in, w))
        if (lower_alpha(w, 3, 10)) words.push_back(w);
    HYDRA_CHECK(words.size() >= 1000, "{}: only {} usable words", path, words.size());
    return cache.emplace(path, std::move(words)).first->second;
}

}  // namespace hydra
