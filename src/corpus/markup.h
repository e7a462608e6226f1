// Markup to plain text, one function per TextFormat (corpus_sources.h). Each keeps the words a reader
// sees (headings, paragraphs, code examples, list items) and drops what only steers a formatter
// (directives, macros, tags, node separators). The result is not yet normalised (text_normalize.h).
#pragma once

#include <string>
#include <string_view>

#include "corpus/corpus_sources.h"

namespace hydra {

std::string strip_rst(std::string_view text);
std::string strip_pod(std::string_view text);
std::string strip_html(std::string_view text);
std::string strip_roff(std::string_view text);
std::string strip_info(std::string_view text);
// Fortune records (separated by lines holding only "%") as paragraphs.
std::string strip_fortune(std::string_view text);
// WordNet data.* lines as "lemma, lemma: gloss" lines; the license header (lines starting with two
// spaces) is dropped.
std::string strip_wordnet(std::string_view text);

// Dispatches on `format` (kPlain and kCode: the text unchanged).
std::string strip_markup(std::string_view text, TextFormat format);

}  // namespace hydra
