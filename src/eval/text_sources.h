// Offline text for the synthetic tasks (research/ruler.md §4): haystack prose from the cache that
// tools/fetch_prose.py fills (.cache/prose/, Jane Austen + Moby-Dick), RULER's noise paragraph, and
// word lists from Debian packages: WordNet lemmas (wordnet-base; stand-in for wonderwords'
// adjective/noun/verb lists: keys and CWE vocabulary) and /usr/share/dict/words (wamerican). Every
// loader caches its result for the process (thread-safe) and fails with a message naming the file and
// the package or script that provides it.
#pragma once

#include <string>
#include <vector>

namespace hydra {

// RULER's noise filler: one paragraph of five short sentences (the passkey filler of Mohtashami &
// Jaggi), written out in our own words of the same shape.
const std::string& noise_paragraph();

// Default directories: $HYDRA_CACHE/prose (else <source>/.cache/prose) and $HYDRA_WORDNET_DIR
// (else /usr/share/wordnet).
std::string default_prose_dir();
std::string default_wordnet_dir();

// The prose corpus as words (whitespace collapsed, RULER-style): the six Austen novels then Moby-Dick,
// in a fixed order, with each book's title/contents head skipped. Throws hydra::Error naming the
// directory and tools/fetch_prose.py when the cache is missing.
const std::vector<std::string>& prose_words(const std::string& dir = default_prose_dir());

enum class WordClass { kNoun, kAdjective, kVerb };
// Single lower-case ASCII lemmas of 3..10 letters that occur in WordNet's tagged corpus (tagsense_cnt
// > 0, which keeps common words), in file order. Throws naming the file and `apt-get install
// wordnet-base` when it is missing.
const std::vector<std::string>& wordnet_words(WordClass cls, const std::string& dir = default_wordnet_dir());

// $HYDRA_DICT when set (a machine without the package, e.g. the GPU box: tools/gpu_build.sh), else
// /usr/share/dict/words.
std::string default_dictionary_path();

// /usr/share/dict/words (package wamerican): lower-case ASCII words of 3..10 letters without
// apostrophes. Throws naming the package when missing.
const std::vector<std::string>& dictionary_words(const std::string& path = default_dictionary_path());

}  // namespace hydra
