// Atomic corpus directory replacement (see corpus_dir.h).
#include "corpus/corpus_dir.h"

#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "train/corpus_manifest.h"
#include "io/dir_kind.h"
#include "io/dir_lock.h"

namespace hydra {

namespace fs = std::filesystem;

void write_corpus_dir_atomically(const std::string& dir_arg, bool force, const std::string& option,
                                 const std::function<void(const fs::path& tmp)>& fill) {
    const fs::path dir = normalize_dir_path(dir_arg, option);
    DirLock lock = DirLock::acquire(dir);
    std::error_code ec;
    if (fs::exists(dir, ec)) {
        const bool empty_dir = fs::is_directory(dir, ec) && fs::is_empty(dir, ec);
        HYDRA_CHECK(
            empty_dir || is_corpus_dir(dir.string()) || force,
            "{} {} exists and is not a hydra corpus (no manifest.json of format hydra-corpus); refusing to "
            "replace it (pass --force to delete it)",
            option, dir.string());
    }
    const fs::path tmp = fs::path(dir.string() + fmt::format(".tmp-{}", getpid()));
    const fs::path old = fs::path(dir.string() + fmt::format(".old-{}", getpid()));
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    HYDRA_CHECK(fs::is_directory(tmp), "{}: cannot create: {}", tmp.string(), ec.message());
    try {
        fill(tmp);
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    if (fs::exists(dir, ec)) {
        fs::rename(dir, old, ec);
        if (ec) {
            fs::remove_all(tmp, ec);
            fail("{}: cannot move the previous copy aside", dir.string());
        }
    }
    fs::rename(tmp, dir, ec);
    if (ec) {
        const std::string why = ec.message();
        if (fs::exists(old)) fs::rename(old, dir, ec);
        fail("{}: cannot rename the new corpus into place: {} (it is kept at {})", dir.string(), why,
             tmp.string());
    }
    fs::remove_all(old, ec);
}

}  // namespace hydra
