// Downloading and unpacking the corpus packages (see deb_fetch.h).
#include "corpus/deb_fetch.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/mapped_file.h"
#include "train/token_shards.h"

extern char** environ;

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

int run_command(const std::vector<std::string>& argv, std::string* out) {
    HYDRA_CHECK(!argv.empty(), "run_command: empty command");
    int pipefd[2] = {-1, -1};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (out) {
        HYDRA_CHECK(pipe(pipefd) == 0, "run_command: pipe failed");
        posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
        posix_spawn_file_actions_addclose(&actions, pipefd[0]);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid;
    const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (out) close(pipefd[1]);
    if (rc != 0) {
        if (out) close(pipefd[0]);
        fail("cannot run {}: {}", argv[0], std::strerror(rc));
    }
    if (out) {
        char buf[4096];
        ssize_t n;
        while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out->append(buf, size_t(n));
        close(pipefd[0]);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

namespace {

// The cached .deb of `name` ("<name>_<version>_<arch>.deb"), or "" when there is none; the
// lexicographically last when an older download is still there.
std::string find_deb(const fs::path& debs, const std::string& name) {
    std::string best;
    std::error_code ec;
    if (!fs::is_directory(debs, ec)) return best;
    for (const auto& e : fs::directory_iterator(debs, ec)) {
        const std::string f = e.path().filename().string();
        if (f.size() > name.size() + 5 && f.compare(0, name.size() + 1, name + "_") == 0 &&
            f.ends_with(".deb") && f > best)
            best = f;
    }
    return best;
}

std::string file_sha256(const fs::path& p) {
    MappedFile f(p.string());
    return sha256_hex(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()));
}

std::string trim_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

}  // namespace

std::vector<FetchedPackage> fetch_packages(const std::vector<PackageSpec>& packages,
                                           const std::string& cache_dir, bool offline) {
    const fs::path cache = fs::absolute(cache_dir);
    const fs::path debs = cache / "debs", extract = cache / "extract";
    std::error_code ec;
    fs::create_directories(debs, ec);
    fs::create_directories(extract, ec);
    HYDRA_CHECK(fs::is_directory(debs) && fs::is_directory(extract), "{}: cannot create the corpus cache: {}",
                cache.string(), ec.message());
    std::vector<FetchedPackage> out;
    for (const PackageSpec& p : packages) {
        std::string deb = find_deb(debs, p.name);
        if (deb.empty()) {
            HYDRA_CHECK(!offline, "{}: no cached .deb of {} in {}; run `hydra corpus fetch` with network",
                        p.name, p.name, debs.string());
            fmt::print(stderr, "[corpus] apt-get download {}\n", p.name);
            // apt-get downloads into the working directory: run it through `sh -c 'cd DIR && ...'`
            // with the names passed as positional arguments, never spliced into the script.
            const int rc = run_command(
                {"sh", "-c", "cd \"$1\" && apt-get download -q \"$2\"", "sh", debs.string(), p.name});
            HYDRA_CHECK(rc == 0,
                        "apt-get download {} failed (exit {}): is the package in the apt lists (apt-get "
                        "update)?",
                        p.name, rc);
            deb = find_deb(debs, p.name);
            HYDRA_CHECK(!deb.empty(), "apt-get download {} left no {}_*.deb in {}", p.name, p.name,
                        debs.string());
        }
        const fs::path deb_path = debs / deb;
        FetchedPackage f;
        f.name = p.name;
        f.deb_file = deb;
        f.deb_bytes = int64_t(fs::file_size(deb_path, ec));
        std::string version;
        const int vrc = run_command({"dpkg-deb", "-f", deb_path.string(), "Version"}, &version);
        HYDRA_CHECK(
            vrc == 0 && !trim_line(version).empty(),
            "{}: dpkg-deb cannot read it (exit {}): a corrupt or truncated .deb; delete it and fetch again",
            deb_path.string(), vrc);
        f.version = trim_line(version);
        f.deb_sha256 = file_sha256(deb_path);
        const fs::path dir = extract / p.name;
        f.extract_dir = dir.string();
        if (!fs::is_directory(dir)) {
            const fs::path tmp = extract / fmt::format("{}.tmp-{}", p.name, getpid());
            fs::remove_all(tmp, ec);
            fmt::print(stderr, "[corpus] unpacking {}\n", deb);
            const int rc = run_command({"dpkg-deb", "-x", deb_path.string(), tmp.string()});
            if (rc != 0) {
                fs::remove_all(tmp, ec);
                fail(
                    "{}: dpkg-deb -x failed (exit {}): a corrupt or truncated .deb; delete it and fetch "
                    "again",
                    deb_path.string(), rc);
            }
            if (!p.tarball.empty()) {
                const fs::path tarball = tmp / p.tarball;
                const fs::path into = tarball.parent_path() / "unpacked";
                fs::create_directories(into, ec);
                const int trc = run_command({"tar", "-xf", tarball.string(), "-C", into.string()});
                if (trc != 0) {
                    fs::remove_all(tmp, ec);
                    fail("{}: tar -xf {} failed (exit {})", deb_path.string(), p.tarball, trc);
                }
                fs::remove(tarball, ec);  // the .deb still holds it
            }
            fs::rename(tmp, dir, ec);
            HYDRA_CHECK(!ec, "{}: cannot rename into place: {}", dir.string(), ec.message());
        }
        out.push_back(f);
    }
    json j = json::array();
    for (const FetchedPackage& f : out)
        j.push_back({{"package", f.name},
                     {"version", f.version},
                     {"deb", f.deb_file},
                     {"sha256", f.deb_sha256},
                     {"bytes", f.deb_bytes}});
    // Merge with what an earlier fetch of other packages recorded.
    const fs::path record = cache / "fetch.json";
    if (fs::exists(record)) {
        try {
            const json old = parse_json_bounded(read_text_file(record), record.string());
            if (old.is_object() && old.contains("packages") && old["packages"].is_array())
                for (const json& e : old["packages"])
                    if (e.is_object() && e.contains("package") &&
                        std::none_of(out.begin(), out.end(),
                                     [&](const FetchedPackage& f) { return e["package"] == f.name; }))
                        j.push_back(e);
        } catch (const std::exception&) {
            // unreadable: replaced below
        }
    }
    write_text_file(record, json{{"format", "hydra-corpus-fetch"}, {"version", 1}, {"packages", j}}.dump(1));
    return out;
}

std::vector<FetchedPackage> read_fetched_packages(const std::vector<PackageSpec>& packages,
                                                  const std::string& cache_dir) {
    const fs::path cache = fs::absolute(cache_dir);
    const fs::path record = cache / "fetch.json";
    HYDRA_CHECK(fs::is_regular_file(record), "{}: missing; run `hydra corpus fetch` first", record.string());
    json j = parse_json_bounded(read_text_file(record), record.string());
    HYDRA_CHECK(j.is_object() && j.contains("format") && j["format"] == "hydra-corpus-fetch" &&
                    j.contains("packages") && j["packages"].is_array(),
                "{}: not a corpus fetch record", record.string());
    std::vector<FetchedPackage> out;
    for (const PackageSpec& p : packages) {
        const json* e = nullptr;
        for (const json& x : j["packages"])
            if (x.is_object() && x.value("package", "") == p.name) e = &x;
        HYDRA_CHECK(e, "{}: package {} was not fetched; run `hydra corpus fetch`", record.string(), p.name);
        FetchedPackage f;
        f.name = p.name;
        try {
            f.version = e->at("version").get<std::string>();
            f.deb_file = e->at("deb").get<std::string>();
            f.deb_sha256 = e->at("sha256").get<std::string>();
            f.deb_bytes = e->at("bytes").get<int64_t>();
        } catch (const json::exception& ex) {
            fail("{}: entry of {}: {}", record.string(), p.name, ex.what());
        }
        f.extract_dir = (cache / "extract" / p.name).string();
        HYDRA_CHECK(fs::is_directory(f.extract_dir), "{}: missing; run `hydra corpus fetch`", f.extract_dir);
        out.push_back(f);
    }
    return out;
}

}  // namespace hydra
