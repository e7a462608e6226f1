// Hooked file-system calls (see fault_injection.h).
#include "io/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace hydra {

namespace {

IoHook& hook() {
    static IoHook h;
    return h;
}

// The hook's verdict for one call: 0 to go ahead, else the errno to fail with.
int injected(IoOp op, const std::string& path, const std::string& to = "") {
    const IoHook& h = hook();
    return h ? h(op, path, to) : 0;
}

}  // namespace

const char* io_op_name(IoOp op) {
    switch (op) {
        case IoOp::Create:
            return "create";
        case IoOp::Write:
            return "write";
        case IoOp::Fsync:
            return "fsync";
        case IoOp::Rename:
            return "rename";
        case IoOp::Remove:
            return "remove";
    }
    return "?";
}

void set_io_hook(IoHook h) {
    hook() = std::move(h);
}

int io_create(const std::string& path, int extra_flags, mode_t mode) {
    if (const int err = injected(IoOp::Create, path)) {
        errno = err;
        return -1;
    }
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | extra_flags, mode);
}

ssize_t io_write(int fd, const void* data, size_t n, const std::string& path) {
    if (const int err = injected(IoOp::Write, path)) {
        errno = err;
        return -1;
    }
    return ::write(fd, data, n);
}

int io_fsync(int fd, const std::string& path) {
    if (const int err = injected(IoOp::Fsync, path)) {
        errno = err;
        return -1;
    }
    return ::fsync(fd);
}

int io_rename(const std::string& from, const std::string& to) {
    if (const int err = injected(IoOp::Rename, from, to)) {
        errno = err;
        return -1;
    }
    return ::rename(from.c_str(), to.c_str());
}

int io_remove(const std::string& path) {
    if (const int err = injected(IoOp::Remove, path)) {
        errno = err;
        return -1;
    }
    return std::remove(path.c_str());
}

bool io_write_all(int fd, const void* data, size_t n, const std::string& path) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = io_write(fd, p, n, path);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return false;
        if (w == 0) {
            errno = ENOSPC;
            return false;
        }
        p += w;
        n -= size_t(w);
    }
    return true;
}

}  // namespace hydra
