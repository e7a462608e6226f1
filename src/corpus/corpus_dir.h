// Crash-safe replacement of a corpus directory: the build fills "<dir>.tmp-<pid>", which then takes the
// place of `dir` by renames, under the directory's lock (io/dir_lock.h). A corpus directory holds a
// variable number of shard files, so it cannot be a DirKind (io/dir_kind.h lists fixed file names);
// instead manifest.json (format "hydra-corpus", corpus_manifest.h) marks it as hydra's, and a path holding
// anything else is refused unless `force`.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace hydra {

// Calls fill(tmp) on a fresh directory next to `dir`, then puts it in place of `dir`. On any failure the
// temporary is removed and `dir` is left as it was. Throws hydra::Error naming `option` when `dir` exists
// and is neither empty nor a corpus (unless force).
void write_corpus_dir_atomically(const std::string& dir, bool force, const std::string& option,
                                 const std::function<void(const std::filesystem::path& tmp)>& fill);

}  // namespace hydra
