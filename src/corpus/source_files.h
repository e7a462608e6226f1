// The files a corpus source reads (corpus_sources.h rules applied to the unpacked packages) and their
// bytes, gunzipped when the name ends in .gz or .dz (dictzip is gzip with an index in an extra field).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "corpus/corpus_sources.h"

namespace hydra {

struct SourceFile {
    std::string path;  // absolute
    std::string name;  // stable document name: "<package>/<path inside the package>"
    std::string package;
};

// Files of `source`, sorted by name; `extract_dirs[i]` is the unpacked tree of package i of
// catalog_packages(). A rule directory that does not exist is an error naming it (a package whose
// layout changed). Prose-cache files are taken from `prose_dir`.
std::vector<SourceFile> list_source_files(const SourceSpec& source, const std::vector<PackageSpec>& packages,
                                          const std::vector<std::string>& extract_dirs,
                                          const std::string& prose_dir);

// Whole file, gunzipped for .gz/.dz names (all gzip members). Throws hydra::Error naming the file for an
// unreadable file, corrupt gzip data, or output beyond max_bytes.
std::string read_source_file(const std::string& path, int64_t max_bytes = int64_t(1) << 30);

}  // namespace hydra
