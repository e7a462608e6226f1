// Crash-consistent directory writes. A directory is filled under "<dir>.tmp-<pid>", marked complete
// by a manifest written last (dir_kind.h), and swapped in by two renames (dir -> "<dir>.old-<pid>",
// tmp -> dir) under the directory's lock (dir_lock.h). A crash at any step leaves either the
// previous complete copy, or the new complete copy under its temporary name, or both; the next
// writer or reader (recover_directory) picks the newest complete copy by the manifests' generation
// counter, renames it into place and removes the leftovers. Failures (full disk, unwritable
// folder) keep the previous copy. Used by training checkpoints and model directories alike.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/dir_kind.h"
#include "io/dir_lock.h"

namespace hydra {

// Calls fill(tmp) on a fresh temporary directory next to `dir`, then replaces `dir` with it. Takes
// the lock of `dir` (re-entrant), finishes an earlier cut save first, and refuses (hydra::Error)
// when `dir` exists and is not a hydra directory of `kind`. On any failure the temporary is
// removed, `dir` is left as it was, and the error names the kind and `dir`.
void write_directory_atomically(const std::string& dir, const DirKind& kind,
                                const std::function<void(const std::filesystem::path& tmp)>& fill);

// Finishes or undoes a save that a crash cut: among `dir` and its "<dir>.tmp-<pid>" /
// "<dir>.old-<pid>" siblings the complete copy of the highest generation becomes `dir`, and the
// other siblings are removed (those holding files hydra did not write are kept and reported).
// `kind` null accepts the kind the manifests name. The caller holds the lock of `dir`. Returns one
// line per action taken (for the user).
std::vector<std::string> recover_directory(const std::filesystem::path& dir, const DirKind* kind);

// A directory a command is about to write, claimed for the whole command: normalised path, lock
// held, an earlier cut save recovered, and checked to be absent, empty or a hydra directory of
// `kind`. Otherwise hydra::Error naming `option`, unless `force`: then what is there is deleted.
struct ClaimedDir {
    std::filesystem::path path;
    DirLock lock;
    std::vector<std::string> notes;  // recovery and --force actions, for the user
};
ClaimedDir claim_output_dir(const std::string& path, const DirKind& kind, bool force,
                            const std::string& option = "--out");

// For reading `path` (a model or checkpoint directory): when a save of it was cut by a crash,
// recovers it (if no other process holds its lock) and returns its normalised path; otherwise
// returns `path` as given.
std::string settle_directory_for_reading(const std::string& path);

// Writes `text` to "<path>.part", fsyncs it and renames it to `path` (hooked: fault_injection.h).
void write_text_file(const std::filesystem::path& path, const std::string& text);

// Whole file as a string; `hint` is appended to the error when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path, const std::string& hint = "");

}  // namespace hydra
