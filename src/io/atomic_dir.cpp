// Atomic directory and file writes (see atomic_dir.h).
#include "io/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& path, int flags) {
    int fd = ::open(path.c_str(), flags);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

void write_text_file(const fs::path& path, const std::string& text) {
    const std::string tmp = path.string() + ".part";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        HYDRA_CHECK(out.good(), "{}: cannot create file", tmp);
        out.write(text.data(), std::streamsize(text.size()));
        out.flush();
        HYDRA_CHECK(out.good(), "{}: write failed (disk full?)", tmp);
    }
    fsync_path(tmp, O_RDONLY);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    HYDRA_CHECK(!ec, "{}: cannot rename into place: {}", path.string(), ec.message());
}

std::string read_text_file(const fs::path& path, const std::string& hint) {
    std::ifstream in(path, std::ios::binary);
    HYDRA_CHECK(in.good(), "{}: cannot open{}", path.string(), hint.empty() ? "" : " (" + hint + ")");
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

void write_directory_atomically(const std::string& dir, const std::string& what,
                                const std::function<void(const fs::path& tmp)>& fill) {
    const fs::path target = fs::absolute(fs::path(dir).lexically_normal());
    const fs::path parent = target.parent_path();
    const fs::path tmp = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
    const fs::path old = parent / (target.filename().string() + ".old-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(parent, ec);
    fs::remove_all(tmp, ec);
    try {
        HYDRA_CHECK(fs::create_directory(tmp, ec) && !ec, "{}: cannot create directory: {}", tmp.string(),
                    ec.message());
        fill(tmp);
        fsync_path(tmp, O_RDONLY | O_DIRECTORY);
    } catch (const std::exception& e) {
        fs::remove_all(tmp, ec);
        fail("saving {} {} failed, previous {} kept: {}", what, target.string(), what, e.what());
    }
    // Swap in: the old directory is moved aside first and removed only once the new one is in place.
    const bool had_old = fs::exists(target);
    if (had_old) fs::rename(target, old, ec);
    if (ec) {
        fs::remove_all(tmp);
        fail("saving {} {} failed, previous {} kept: cannot move it aside: {}", what, target.string(), what,
             ec.message());
    }
    fs::rename(tmp, target, ec);
    if (ec) {
        if (had_old) fs::rename(old, target);
        fs::remove_all(tmp);
        fail("saving {} {} failed, previous {} kept: {}", what, target.string(), what, ec.message());
    }
    fsync_path(parent, O_RDONLY | O_DIRECTORY);
    if (had_old) fs::remove_all(old, ec);
}

}  // namespace hydra
