// The file-system calls of a directory save (create, write, fsync, rename, remove), each routed
// through one optional hook, so a test can fail or interrupt a save at every one of its I/O points
// in turn (tests/test_fault_injection.cpp), in the spirit of SQLite's I/O-error and crash tests.
// Without a hook installed each call is the plain POSIX call.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace hydra {

enum class IoOp { Create, Write, Fsync, Rename, Remove };
const char* io_op_name(IoOp op);

// Called before every hooked operation with the operation and the path it acts on (for a rename,
// the source; `to` is the destination, else empty). Returning an errno value (e.g. ENOSPC, EIO)
// makes the call fail with it as the real call would; returning 0 lets the call go ahead.
using IoHook = std::function<int(IoOp op, const std::string& path, const std::string& to)>;

// Installs `hook` for this process (an empty function removes it). Tests only; not thread-safe
// against saves running at the same time.
void set_io_hook(IoHook hook);

// The hooked calls: same results and errno as open(O_CREAT | O_WRONLY | O_TRUNC), write, fsync,
// rename, unlink / rmdir. `path` names the file a descriptor belongs to (for the hook).
int io_create(const std::string& path, int extra_flags = 0, mode_t mode = 0644);
ssize_t io_write(int fd, const void* data, size_t n, const std::string& path);
int io_fsync(int fd, const std::string& path);
int io_rename(const std::string& from, const std::string& to);
int io_remove(const std::string& path);  // a file, a symlink or an empty directory

// Writes all n bytes (retrying short writes and EINTR); false with errno set on failure.
bool io_write_all(int fd, const void* data, size_t n, const std::string& path);

}  // namespace hydra
