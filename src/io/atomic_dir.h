// Atomic directory and file writes: a directory is filled under "<dir>.tmp-<pid>" and swapped in by
// renames, so a crash, a full disk or an unwritable folder never leaves a half-written directory and
// never loses the previous one. Used by training checkpoints and converted models alike.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace hydra {

// Calls fill(tmp) on a fresh temporary directory next to `dir`, then replaces `dir` with it. On any
// failure the temporary is removed, `dir` is left as it was, and hydra::Error names `what` and `dir`.
void write_directory_atomically(const std::string& dir, const std::string& what,
                                const std::function<void(const std::filesystem::path& tmp)>& fill);

// Writes `text` to "<path>.part", fsyncs and renames it to `path`.
void write_text_file(const std::filesystem::path& path, const std::string& text);

// Whole file as a string; `hint` is appended to the error when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path, const std::string& hint = "");

}  // namespace hydra
