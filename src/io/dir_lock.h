// One writer per directory: an exclusive advisory lock (flock) on the sibling file "<dir>.lock",
// held for as long as a command writes `dir`. The lock file sits next to the directory, not in it,
// because saves replace the directory itself by renames. A second process fails at once with the
// holder's PID (written into the lock file); a lock file left by a process that died is simply
// taken over, since the kernel drops a dead process's flock. Within one process the lock is
// re-entrant (a run that holds it may save through functions that take it again).
#pragma once

#include <filesystem>
#include <string>

namespace hydra {

class DirLock {
  public:
    DirLock() = default;
    DirLock(DirLock&& other) noexcept : key_(std::move(other.key_)) { other.key_.clear(); }
    DirLock& operator=(DirLock&& other) noexcept;
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    ~DirLock() { release(); }

    // Takes the lock of `dir` (an absolute, normalised path; it need not exist). Throws hydra::Error
    // naming `dir`, the lock file and the holder's PID when another process holds it.
    static DirLock acquire(const std::filesystem::path& dir);
    // The same, but returns an empty (not held) lock instead of throwing when another process
    // holds it or the lock file cannot be created (read-only places).
    static DirLock try_acquire(const std::filesystem::path& dir);

    bool held() const { return !key_.empty(); }
    void release();

    // "<dir>.lock"
    static std::filesystem::path lock_path(const std::filesystem::path& dir);

  private:
    static DirLock take(const std::filesystem::path& dir, bool throw_if_busy);
    std::string key_;  // the lock file's path while held
};

}  // namespace hydra
