// The corpus catalog: which Debian packages `hydra corpus` reads, which files of each, in which markup,
// and under which license (checked by hand against each package's debian/copyright; every package is
// from Debian main, so DFSG-free). A source is a named group of files with one markup format and one
// mix weight; a package may feed several sources and a source may read several packages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydra {

// How a file's bytes are turned into plain text (corpus/markup.h).
enum class TextFormat {
    kPlain,    // prose or text documentation: whitespace normalised only
    kRst,      // reStructuredText (Sphinx _sources, kernel Documentation)
    kPod,      // Perl POD
    kHtml,     // HTML: tags, scripts and styles dropped, entities decoded
    kRoff,     // man pages (man(7) macros)
    kInfo,     // GNU info: node headers and separators dropped
    kCode,     // source code: kept as is (tabs and indentation included)
    kFortune,  // fortune files: records between "%" lines
    kWordnet,  // WordNet data.* files: "lemma: gloss" lines
};

const char* format_name(TextFormat f);

// Files of one package: those under `dir` (relative to the package's extracted tree) whose name ends
// with one of `suffixes` (all files when empty), skipping paths that contain any of `exclude`.
// Names ending in ".gz" / ".dz" are gunzipped first; the suffix test applies to the full name.
struct FileRule {
    std::string package;
    std::string dir;
    std::vector<std::string> suffixes;
    std::vector<std::string> exclude;
    bool recursive = true;
};

struct SourceSpec {
    std::string name;     // [a-z0-9-]+, unique
    std::string kind;     // "prose" | "docs" | "code" (reporting only)
    std::string license;  // as the package's debian/copyright states it
    TextFormat format = TextFormat::kPlain;
    std::vector<FileRule> rules;
    // Prose already extracted by tools/fetch_prose.py (R data files need R's unserialiser): file names in
    // the prose cache; the package still comes from `rules[0].package` for the manifest.
    std::vector<std::string> prose_cache_files;
    double weight = 1.0;         // default mix weight
    int64_t max_bytes = 0;       // cap on the cleaned text taken from this source (0: none)
    int64_t max_file_bytes = 0;  // files larger than this are skipped (generated tables); 0: none
};

// A package a rule reads, and when its .deb holds a source tarball, the tarball (relative to the
// extracted tree) that `hydra corpus fetch` unpacks next to it.
struct PackageSpec {
    std::string name;
    std::string tarball;  // "" when none
};

// The default catalog (about 1.2 GB of cleaned text, over 300M SmolLM2 tokens).
const std::vector<SourceSpec>& default_corpus_sources();
// Every package the catalog reads, each once, in catalog order.
std::vector<PackageSpec> catalog_packages(const std::vector<SourceSpec>& sources);

// Throws hydra::Error for a bad name, duplicate names, an unknown kind, a negative cap or weight,
// a package name apt would not accept, or a rule path with "..".
void validate_sources(const std::vector<SourceSpec>& sources);

}  // namespace hydra
