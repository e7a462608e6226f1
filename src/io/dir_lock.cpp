// Directory locks (see dir_lock.h).
#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

struct Held {
    int fd = -1;
    int count = 0;
};

std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
// Lock file path -> this process's descriptor and how many DirLock objects share it.
std::map<std::string, Held>& registry() {
    static std::map<std::string, Held> r;
    return r;
}

std::string holder_of(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    char buf[32] = {};
    const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
    ::close(fd);
    std::string pid(buf, n > 0 ? size_t(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return pid;
}

enum class Outcome { Held, Busy, Error };

// One attempt: open or create the lock file, flock it without waiting, and check that the path
// still names the locked file (a releasing holder unlinks it; a lock on an unlinked file is void).
Outcome lock_once(const std::string& path, int& fd_out, std::string& error) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        error = std::strerror(errno);
        return Outcome::Error;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK) return Outcome::Busy;
        error = std::strerror(err);
        return Outcome::Error;
    }
    struct stat by_fd {
    }, by_path{};
    if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0 || by_fd.st_ino != by_path.st_ino ||
        by_fd.st_dev != by_path.st_dev) {
        ::close(fd);
        return Outcome::Busy;  // raced with a release: try again
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
        // The lock is held; only the PID shown to a second writer is missing.
    }
    fd_out = fd;
    return Outcome::Held;
}

}  // namespace

fs::path DirLock::lock_path(const fs::path& dir) {
    return fs::path(dir.string() + ".lock");
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
    if (this != &other) {
        release();
        key_ = std::move(other.key_);
        other.key_.clear();
    }
    return *this;
}

DirLock DirLock::acquire(const fs::path& dir) {
    return take(dir, true);
}
DirLock DirLock::try_acquire(const fs::path& dir) {
    return take(dir, false);
}

DirLock DirLock::take(const fs::path& dir, bool throw_if_busy) {
    const std::string path = lock_path(dir).string();
    DirLock lock;
    std::lock_guard<std::mutex> g(registry_mutex());
    if (auto it = registry().find(path); it != registry().end()) {
        it->second.count++;
        lock.key_ = path;
        return lock;
    }
    std::error_code ec;
    fs::create_directories(dir.parent_path(), ec);
    for (int attempt = 0; attempt < 100; ++attempt) {
        int fd = -1;
        std::string error;
        switch (lock_once(path, fd, error)) {
            case Outcome::Held:
                registry()[path] = Held{fd, 1};
                lock.key_ = path;
                return lock;
            case Outcome::Error:
                if (!throw_if_busy) return lock;
                fail("{}: cannot create the lock file {}: {}", dir.string(), path, error);
            case Outcome::Busy: {
                // An empty file: the holder is releasing it or has not written its PID yet.
                const std::string pid = holder_of(path);
                if (pid.empty()) break;
                if (!throw_if_busy) return lock;
                fail(
                    "{} is in use by another hydra process (PID {}, lock file {}); wait for it to finish or "
                    "write somewhere else",
                    dir.string(), pid, path);
            }
        }
        ::usleep(1000);
    }
    if (!throw_if_busy) return lock;
    fail("{} is in use by another hydra process (lock file {})", dir.string(), path);
}

void DirLock::release() {
    if (key_.empty()) return;
    std::lock_guard<std::mutex> g(registry_mutex());
    auto it = registry().find(key_);
    if (it != registry().end() && --it->second.count == 0) {
        ::unlink(
            key_.c_str());  // before close: a process that opened the old file sees it unlinked and retries
        ::close(it->second.fd);
        registry().erase(it);
    }
    key_.clear();
}

}  // namespace hydra
