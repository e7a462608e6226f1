// Scratch files for tests. slurp: a file's bytes. TempDir: a scratch directory for one test, under the
// system's temporary directory and named after the test's tag, this process and a counter (so parallel test
// processes and two directories of one test never meet), created empty and removed with everything in it when
// the test ends.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

namespace hydra::test {

// A file's bytes as they are on disk ("" when it cannot be read: the test's expectation then fails).
inline std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

struct TempDir {
    std::filesystem::path path;

    explicit TempDir(const std::string& tag = "tmp") {
        static int counter = 0;
        path = std::filesystem::temp_directory_path() /
               ("hydra_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    // The directory, or a path inside it.
    std::string str(const std::string& sub = "") const {
        return sub.empty() ? path.string() : (path / sub).string();
    }
    // Writes `text` to NAME inside the directory; returns its path.
    std::string write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
        return (path / name).string();
    }
    // Names of the entries in the directory (to see that nothing, not even a temporary, was left).
    std::set<std::string> files() const {
        std::set<std::string> out;
        for (const auto& e : std::filesystem::directory_iterator(path))
            out.insert(e.path().filename().string());
        return out;
    }
};

}  // namespace hydra::test
