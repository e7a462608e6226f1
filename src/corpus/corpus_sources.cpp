// The default corpus catalog and its validation (see corpus_sources.h).
#include "corpus/corpus_sources.h"

#include <set>

#include "core/error.h"

namespace hydra {

const char* format_name(TextFormat f) {
    switch (f) {
        case TextFormat::kPlain:
            return "plain";
        case TextFormat::kRst:
            return "rst";
        case TextFormat::kPod:
            return "pod";
        case TextFormat::kHtml:
            return "html";
        case TextFormat::kRoff:
            return "roff";
        case TextFormat::kInfo:
            return "info";
        case TextFormat::kCode:
            return "code";
        case TextFormat::kFortune:
            return "fortune";
        case TextFormat::kWordnet:
            return "wordnet";
    }
    return "?";
}

const std::vector<SourceSpec>& default_corpus_sources() {
    using F = TextFormat;
    // Weights are relative window probabilities of the default mix: English prose and documentation
    // get about half of the windows although they are a fifth of the tokens, so a 50M-token student
    // budget sees them a few times and the kernel only a fraction.
    static const std::vector<SourceSpec> kSources = {
        // ---- prose ----
        {"austen",
         "prose",
         "text public domain; package MIT",
         F::kPlain,
         {{"r-cran-janeaustenr", "", {}, {}}},
         {"austen_emma.txt", "austen_mansfieldpark.txt", "austen_northangerabbey.txt",
          "austen_persuasion.txt", "austen_prideprejudice.txt", "austen_sensesensibility.txt"},
         2.0},
        {"moby-dick",
         "prose",
         "text public domain; package MIT",
         F::kPlain,
         {{"r-cran-tokenizers", "", {}, {}}},
         {"mobydick.txt"},
         0.6},
        {"jargon",
         "prose",
         "public domain",
         F::kPlain,
         {{"jargon-text", "usr/share/doc/jargon-text", {"jargon.txt.gz"}, {}}},
         {},
         0.6},
        {"devils-dictionary",
         "prose",
         "public domain",
         F::kPlain,
         {{"dict-devil", "usr/share/dictd", {".dict.dz"}, {}}},
         {},
         0.2},
        {"fortunes",
         "prose",
         "BSD-4-clause-UC and public domain (main)",
         F::kFortune,
         {{"fortunes", "usr/share/games/fortunes", {}, {".dat", ".u8"}}},
         {},
         0.5},
        {"gcide",
         "prose",
         "GPL-3+",
         F::kPlain,
         {{"dict-gcide", "usr/share/dictd", {"gcide.dict.dz"}, {}}},
         {},
         2.0},
        {"wordnet-glosses",
         "prose",
         "WordNet-3.0 (BSD-like)",
         F::kWordnet,
         {{"wordnet-base", "usr/share/wordnet", {"data.noun", "data.verb", "data.adj", "data.adv"}, {}}},
         {},
         1.0},
        // ---- documentation ----
        {"python-docs",
         "docs",
         "PSF-2.0",
         F::kRst,
         {{"python3.11-doc", "usr/share/doc/python3.11/html/_sources", {".rst.txt"}, {}}},
         {},
         4.0},
        {"perl-docs",
         "docs",
         "GPL-1+ or Artistic",
         F::kPod,
         {{"perl-doc", "usr/share/perl/5.36.0/pod", {".pod"}, {}}},
         {},
         2.5},
        {"linux-docs",
         "docs",
         "GPL-2",
         F::kRst,
         {{"linux-doc-6.1",
           "usr/share/doc/linux-doc-6.1/Documentation",
           {".rst.gz", ".txt.gz"},
           {"/translations/"}}},
         {},
         5.0},
        {"debian-handbook",
         "docs",
         "GPL-2+ or CC-BY-SA-3.0",
         F::kHtml,
         {{"debian-handbook", "usr/share/doc/debian-handbook/html/en-US", {".html"}, {}}},
         {},
         1.0},
        {"debian-reference",
         "docs",
         "GPL-2+",
         F::kPlain,
         {{"debian-reference-en", "usr/share/debian-reference", {".en.txt.gz"}, {}}},
         {},
         0.5},
        {"debian-policy",
         "docs",
         "GPL-2+",
         F::kPlain,
         {{"debian-policy", "usr/share/doc/debian-policy", {".txt.gz"}, {"changelog"}, false}},
         {},
         0.5},
        {"developers-reference",
         "docs",
         "MIT",
         F::kRst,
         {{"developers-reference", "usr/share/developers-reference/_sources", {".rst.txt"}, {}}},
         {},
         0.5},
        {"postgresql-docs",
         "docs",
         "PostgreSQL",
         F::kHtml,
         {{"postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html", {".html"}, {}}},
         {},
         2.5},
        {"git-docs",
         "docs",
         "GPL-2",
         F::kPlain,
         {{"git-doc", "usr/share/doc/git-doc", {".txt"}, {"/RelNotes/"}}},
         {},
         1.5},
        {"django-docs",
         "docs",
         "BSD-3-clause",
         F::kHtml,
         {{"python-django-doc",
           "usr/share/doc/python-django-doc/html",
           {".html"},
           {"/_modules/", "genindex", "py-modindex", "search.html"}}},
         {},
         2.0},
        {"man-pages",
         "docs",
         "GPL-2+ / BSD / Verbatim (manpages, main)",
         F::kRoff,
         {{"manpages", "usr/share/man", {".gz"}, {}}, {"manpages-dev", "usr/share/man", {".gz"}, {}}},
         {},
         1.5},
        {"info-manuals",
         "docs",
         "GFDL-1.3 without invariant sections / GPL-3+",
         F::kInfo,
         {{"gnu-standards", "usr/share/info", {".info.gz"}, {}},
          {"binutils-doc", "usr/share/info", {".info.gz"}, {}},
          {"bash-doc", "usr/share/info", {".info.gz"}, {}}},
         {},
         1.0},
        {"vim-help",
         "docs",
         "Vim",
         F::kPlain,
         {{"vim-runtime", "usr/share/vim/vim90/doc", {".txt"}, {}}},
         {},
         1.0},
        // ---- source code ----
        {"python-stdlib",
         "code",
         "PSF-2.0",
         F::kCode,
         {{"libpython3.11-stdlib", "usr/lib/python3.11", {".py"}, {}}},
         {},
         3.0,
         0,
         512 << 10},
        {"perl-modules",
         "code",
         "GPL-1+ or Artistic",
         F::kCode,
         {{"perl-modules-5.36", "usr/share/perl/5.36.0", {".pm"}, {}}},
         {},
         1.5,
         0,
         512 << 10},
        {"go-stdlib",
         "code",
         "BSD-3-clause",
         F::kCode,
         {{"golang-1.19-src", "usr/share/go-1.19/src", {".go"}, {"/testdata/"}}},
         {},
         5.0,
         0,
         512 << 10},
        {"rust-stdlib",
         "code",
         "MIT or Apache-2.0",
         F::kCode,
         {{"rust-src", "usr/src/rustc-1.63.0", {".rs"}, {"/vendor/"}}},
         {},
         5.0,
         0,
         512 << 10},
        {"glibc-source",
         "code",
         "LGPL-2.1+",
         F::kCode,
         {{"glibc-source", "usr/src/glibc/unpacked", {".c", ".h"}, {"/po/", "/localedata/"}}},
         {},
         2.0,
         0,
         512 << 10},
        // The kernel is the bulk of the tokens; machine-generated register headers (amdgpu asic_reg,
        // ...) are skipped by the per-file cap and the directory filter.
        {"linux-source",
         "code",
         "GPL-2",
         F::kCode,
         {{"linux-source-6.1",
           "usr/src/unpacked",
           {".c", ".h"},
           {"/include/asic_reg/", "/amd/include/", "/firmware/"}}},
         {},
         10.0,
         int64_t(900) << 20,
         256 << 10},
    };
    return kSources;
}

std::vector<PackageSpec> catalog_packages(const std::vector<SourceSpec>& sources) {
    std::vector<PackageSpec> out;
    std::set<std::string> seen;
    for (const SourceSpec& s : sources)
        for (const FileRule& r : s.rules)
            if (seen.insert(r.package).second) {
                PackageSpec p{r.package, ""};
                if (r.package == "linux-source-6.1") p.tarball = "usr/src/linux-source-6.1.tar.xz";
                if (r.package == "glibc-source") p.tarball = "usr/src/glibc/glibc-2.36.tar.xz";
                out.push_back(p);
            }
    return out;
}

void validate_sources(const std::vector<SourceSpec>& sources) {
    HYDRA_CHECK(!sources.empty(), "corpus: no sources");
    std::set<std::string> names;
    for (const SourceSpec& s : sources) {
        HYDRA_CHECK(
            !s.name.empty() && s.name.size() <= 64 &&
                s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos,
            "corpus source '{}': names are 1..64 of [a-z0-9-]", s.name);
        HYDRA_CHECK(names.insert(s.name).second, "corpus source '{}' is listed twice", s.name);
        HYDRA_CHECK(s.kind == "prose" || s.kind == "docs" || s.kind == "code",
                    "corpus source '{}': kind '{}' is not prose, docs or code", s.name, s.kind);
        HYDRA_CHECK(s.weight >= 0 && s.max_bytes >= 0 && s.max_file_bytes >= 0,
                    "corpus source '{}': weight and caps must be >= 0", s.name);
        HYDRA_CHECK(!s.rules.empty(), "corpus source '{}' reads no package", s.name);
        for (const FileRule& r : s.rules) {
            HYDRA_CHECK(!r.package.empty() &&
                            r.package.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.+-") ==
                                std::string::npos,
                        "corpus source '{}': '{}' is not a Debian package name", s.name, r.package);
            HYDRA_CHECK(r.dir.find("..") == std::string::npos && (r.dir.empty() || r.dir[0] != '/'),
                        "corpus source '{}': rule directory '{}' must be relative without '..'", s.name,
                        r.dir);
        }
    }
}

}  // namespace hydra
