// Crash-consistent directory writes and their recovery (see atomic_dir.h).
#include "io/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/fault_injection.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

// 0, or the errno of opening / fsyncing the directory.
int fsync_dir(const fs::path& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    const int rc = io_fsync(fd, dir.string());
    const int err = rc == 0 ? 0 : errno;
    ::close(fd);
    return err == EINVAL ? 0 : err;  // file systems without directory fsync
}

// "<base>.tmp-<digits>" or "<base>.old-<digits>": a sibling left by a save of `base`.
bool is_sibling_of(const std::string& name, const std::string& base, bool* is_tmp) {
    for (const char* tag : {".tmp-", ".old-"}) {
        const std::string prefix = base + tag;
        if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
            std::all_of(name.begin() + long(prefix.size()), name.end(),
                        [](char c) { return c >= '0' && c <= '9'; })) {
            if (is_tmp) *is_tmp = tag[1] == 't';
            return true;
        }
    }
    return false;
}

std::vector<fs::path> save_siblings(const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code ec;
    const std::string base = dir.filename().string();
    for (const auto& e : fs::directory_iterator(dir.parent_path(), ec))
        if (is_sibling_of(e.path().filename().string(), base, nullptr)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

// Whether a leftover holds only files hydra writes (so deleting it loses nothing of the user's).
bool only_hydra_files(const fs::path& dir) {
    std::error_code ec;
    if (fs::is_symlink(dir, ec) || !fs::is_directory(dir, ec)) return false;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        std::error_code ec2;
        if (!e.is_regular_file(ec2) || e.is_symlink(ec2)) return false;
        const bool known = name == kManifestName || is_scratch_name(name) ||
                           std::find(checkpoint_dir_kind().files.begin(), checkpoint_dir_kind().files.end(),
                                     name) != checkpoint_dir_kind().files.end() ||
                           std::find(model_dir_kind().files.begin(), model_dir_kind().files.end(), name) !=
                               model_dir_kind().files.end();
        if (!known) return false;
    }
    return !ec;
}

// Removes a leftover copy: its manifest first, so a removal cut half-way never looks complete.
bool remove_copy(const fs::path& dir) {
    std::error_code ec;
    if (fs::exists(dir / kManifestName, ec) && io_remove((dir / kManifestName).string()) != 0) return false;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) files.push_back(e.path());
    for (const fs::path& f : files)
        if (io_remove(f.string()) != 0) return false;
    return io_remove(dir.string()) == 0;
}

const DirKind* kind_named(const std::string& name) {
    if (name == checkpoint_dir_kind().name) return &checkpoint_dir_kind();
    if (name == model_dir_kind().name) return &model_dir_kind();
    return nullptr;
}

void print_notes(const std::vector<std::string>& notes) {
    for (const std::string& n : notes) fmt::print(stderr, "hydra: {}\n", n);
}

}  // namespace

void write_text_file(const fs::path& path, const std::string& text) {
    const std::string tmp = path.string() + ".part";
    const int fd = io_create(tmp);
    HYDRA_CHECK(fd >= 0, "{}: cannot create file: {}", tmp, std::strerror(errno));
    if (!io_write_all(fd, text.data(), text.size(), tmp) || io_fsync(fd, tmp) != 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail("{}: write failed: {}", tmp, std::strerror(err));
    }
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail("{}: write failed: {}", tmp, std::strerror(err));
    }
    if (io_rename(tmp, path.string()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail("{}: cannot rename into place: {}", path.string(), std::strerror(err));
    }
}

std::string read_text_file(const fs::path& path, const std::string& hint) {
    std::ifstream in(path, std::ios::binary);
    HYDRA_CHECK(in.good(), "{}: cannot open{}", path.string(), hint.empty() ? "" : " (" + hint + ")");
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

std::vector<std::string> recover_directory(const fs::path& dir, const DirKind* kind) {
    std::vector<std::string> notes;
    const std::vector<fs::path> siblings = save_siblings(dir);
    if (siblings.empty()) return notes;
    // The newest complete sibling: highest generation; a new copy (.tmp-) before an old one.
    std::optional<fs::path> best;
    int64_t best_gen = -1;
    bool best_tmp = false;
    std::string best_kind;
    for (const fs::path& s : siblings) {
        bool is_tmp = false;
        is_sibling_of(s.filename().string(), dir.filename().string(), &is_tmp);
        const std::optional<DirManifest> m = read_manifest(s);
        if (!m || (kind && m->kind != kind->name) || !kind_named(m->kind) || !manifest_complete(s, *m))
            continue;
        if (m->generation > best_gen || (m->generation == best_gen && is_tmp && !best_tmp)) {
            best = s, best_gen = m->generation, best_tmp = is_tmp, best_kind = m->kind;
        }
    }
    std::vector<fs::path> leftovers = siblings;
    if (best) {
        const DirInspection here = inspect_directory(dir, *kind_named(best_kind));
        const int64_t here_gen = here.manifest ? here.manifest->generation : 0;
        const bool replace = here.state == DirState::Missing || here.state == DirState::Empty ||
                             (here.state == DirState::Ours && (!here.complete || best_gen > here_gen));
        if (replace) {
            std::optional<fs::path> aside;
            if (here.state != DirState::Missing) {
                aside = dir.parent_path() / (dir.filename().string() + ".old-" + std::to_string(::getpid()));
                HYDRA_CHECK(io_rename(dir.string(), aside->string()) == 0,
                            "{}: cannot recover the save that a crash cut (moving the older copy aside): {}",
                            dir.string(), std::strerror(errno));
            }
            if (io_rename(best->string(), dir.string()) != 0) {
                const int err = errno;
                if (aside) io_rename(aside->string(), dir.string());
                fail("{}: cannot recover the save that a crash cut (renaming {} into place): {}",
                     dir.string(), best->string(), std::strerror(err));
            }
            notes.push_back(
                fmt::format("{}: recovered the newest complete copy (generation {}) from {}, left by a save "
                            "that was cut",
                            dir.string(), best_gen, best->filename().string()));
            leftovers.erase(std::find(leftovers.begin(), leftovers.end(), *best));
            if (aside) leftovers.push_back(*aside);
        }
    }
    fsync_dir(dir.parent_path());
    for (const fs::path& s : leftovers) {
        if (!only_hydra_files(s)) {
            notes.push_back(fmt::format("{}: left in place: it holds files hydra did not write", s.string()));
            continue;
        }
        if (!remove_copy(s))
            notes.push_back(
                fmt::format("{}: could not remove this leftover: {}", s.string(), std::strerror(errno)));
    }
    return notes;
}

void write_directory_atomically(const std::string& dir, const DirKind& kind,
                                const std::function<void(const fs::path& tmp)>& fill) {
    const fs::path target = normalize_dir_path(dir, kind.name);
    const DirLock lock = DirLock::acquire(target);
    print_notes(recover_directory(target, &kind));
    const DirInspection here = inspect_directory(target, kind);
    HYDRA_CHECK(here.state != DirState::Foreign && here.state != DirState::OtherKind,
                "saving {} {} failed: {}", kind.name, target.string(), refusal_message(target, kind, here));
    const bool had_previous = here.state == DirState::Ours && here.complete;
    const std::string kept = had_previous ? fmt::format("previous {} kept", kind.name)
                                          : fmt::format("no {} was written there", kind.name);
    const int64_t generation = (here.manifest ? here.manifest->generation : 0) + 1;
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
        // Last: the manifest marks the copy complete (every file above is already fsynced).
        write_text_file(tmp / kManifestName, manifest_text(tmp, kind, generation));
        if (const int err = fsync_dir(tmp)) fail("{}: fsync failed: {}", tmp.string(), std::strerror(err));
    } catch (const std::exception& e) {
        fs::remove_all(tmp, ec);
        fail("saving {} {} failed, {}: {}", kind.name, target.string(), kept, e.what());
    }
    // Swap in: the old copy is moved aside first and removed only once the new one is in place.
    const bool had_old = fs::exists(fs::symlink_status(target, ec));
    if (had_old && io_rename(target.string(), old.string()) != 0) {
        const int err = errno;
        fs::remove_all(tmp, ec);
        fail("saving {} {} failed, {}: cannot move it aside: {}", kind.name, target.string(), kept,
             std::strerror(err));
    }
    if (io_rename(tmp.string(), target.string()) != 0) {
        const int err = errno;
        if (had_old) io_rename(old.string(), target.string());
        fs::remove_all(tmp, ec);
        fail("saving {} {} failed, {}: {}", kind.name, target.string(), kept, std::strerror(err));
    }
    // The new copy is in place; what follows only tidies up, and the next save or load finishes it.
    if (const int err = fsync_dir(parent))
        fmt::print(stderr, "hydra: warning: {}: fsync failed ({}); the save may not survive a power loss\n",
                   parent.string(), std::strerror(err));
    if (had_old && !remove_copy(old))
        fmt::print(stderr,
                   "hydra: warning: {}: could not remove the previous copy ({}); the next save removes it\n",
                   old.string(), std::strerror(errno));
}

ClaimedDir claim_output_dir(const std::string& path, const DirKind& kind, bool force,
                            const std::string& option) {
    ClaimedDir c;
    c.path = normalize_dir_path(path, option);
    c.lock = DirLock::acquire(c.path);
    c.notes = recover_directory(c.path, &kind);
    const DirInspection here = inspect_directory(c.path, kind);
    if (here.state == DirState::Foreign || here.state == DirState::OtherKind) {
        HYDRA_CHECK(force, "{}: {}", option, refusal_message(c.path, kind, here));
        std::error_code ec;
        fs::remove_all(c.path, ec);
        HYDRA_CHECK(!ec, "{} --force: cannot delete {}: {}", option, c.path.string(), ec.message());
        c.notes.push_back(fmt::format("--force: deleted {} to write a {} there", c.path.string(), kind.name));
    }
    return c;
}

std::string settle_directory_for_reading(const std::string& path) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return path;
    fs::path p;
    try {
        p = normalize_dir_path(path, "path");
    } catch (const Error&) {
        return path;
    }
    if (save_siblings(p).empty()) return path;
    const DirLock lock = DirLock::try_acquire(p);
    if (lock.held()) print_notes(recover_directory(p, nullptr));
    return p.string();
}

}  // namespace hydra
