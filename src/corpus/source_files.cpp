// Listing and reading a corpus source's files (see source_files.h).
#include "corpus/source_files.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string gunzip(const std::string& in, const std::string& path, int64_t max_bytes) {
    std::string out;
    z_stream zs{};
    HYDRA_CHECK(inflateInit2(&zs, 15 + 32) == Z_OK, "{}: zlib init failed", path);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = uInt(in.size());
    char buf[1 << 16];
    while (true) {
        zs.next_out = reinterpret_cast<Bytef*>(buf);
        zs.avail_out = sizeof buf;
        const int rc = inflate(&zs, Z_NO_FLUSH);
        out.append(buf, sizeof buf - zs.avail_out);
        if (int64_t(out.size()) > max_bytes) {
            inflateEnd(&zs);
            fail("{}: more than {} bytes once decompressed", path, max_bytes);
        }
        if (rc == Z_STREAM_END) {
            if (zs.avail_in == 0) break;
            inflateReset(&zs);  // another gzip member follows
            continue;
        }
        if (rc != Z_OK) {
            inflateEnd(&zs);
            fail("{}: corrupt gzip data ({})", path, zs.msg ? zs.msg : "truncated");
        }
        if (zs.avail_in == 0 && zs.avail_out != 0) {
            inflateEnd(&zs);
            fail("{}: truncated gzip data", path);
        }
    }
    inflateEnd(&zs);
    return out;
}

}  // namespace

std::string read_source_file(const std::string& path, int64_t max_bytes) {
    std::error_code ec;
    HYDRA_CHECK(fs::is_regular_file(path, ec), "{}: not a readable regular file", path);
    std::ifstream in(path, std::ios::binary);
    HYDRA_CHECK(bool(in), "{}: cannot open for reading", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    HYDRA_CHECK(!in.bad(), "{}: read error", path);
    std::string raw = ss.str();
    if (ends_with(path, ".gz") || ends_with(path, ".dz")) return gunzip(raw, path, max_bytes);
    HYDRA_CHECK(int64_t(raw.size()) <= max_bytes, "{}: more than {} bytes", path, max_bytes);
    return raw;
}

std::vector<SourceFile> list_source_files(const SourceSpec& source, const std::vector<PackageSpec>& packages,
                                          const std::vector<std::string>& extract_dirs,
                                          const std::string& prose_dir) {
    std::vector<SourceFile> out;
    if (!source.prose_cache_files.empty()) {
        for (const std::string& f : source.prose_cache_files) {
            const fs::path p = fs::path(prose_dir) / f;
            HYDRA_CHECK(fs::is_regular_file(p),
                        "{}: missing (corpus source {}); run tools/setup.sh --no-build, "
                        "which fills the prose cache",
                        p.string(), source.name);
            out.push_back({p.string(), source.rules[0].package + "/" + f, source.rules[0].package});
        }
        return out;
    }
    for (const FileRule& r : source.rules) {
        size_t k = 0;
        while (k < packages.size() && packages[k].name != r.package) ++k;
        HYDRA_CHECK(k < packages.size() && k < extract_dirs.size(),
                    "corpus source {}: package {} not fetched", source.name, r.package);
        const fs::path root = fs::path(extract_dirs[k]);
        const fs::path dir = root / r.dir;
        std::error_code ec;
        HYDRA_CHECK(fs::is_directory(dir, ec),
                    "{}: missing or not a directory (corpus source {}, package {})", dir.string(),
                    source.name, r.package);
        auto consider = [&](const fs::directory_entry& e) {
            std::error_code ec2;
            if (!e.is_regular_file(ec2) || e.is_symlink(ec2)) return;
            const std::string full = e.path().string();
            const std::string fname = e.path().filename().string();
            if (!r.suffixes.empty() &&
                std::none_of(r.suffixes.begin(), r.suffixes.end(),
                             [&](const std::string& s) { return ends_with(fname, s); }))
                return;
            const std::string rel = fs::relative(e.path(), root, ec2).string();
            if (std::any_of(r.exclude.begin(), r.exclude.end(),
                            [&](const std::string& x) { return ("/" + rel).find(x) != std::string::npos; }))
                return;
            if (source.max_file_bytes > 0 && int64_t(e.file_size(ec2)) > source.max_file_bytes) return;
            out.push_back({full, r.package + "/" + rel, r.package});
        };
        if (r.recursive) {
            fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
            HYDRA_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
            for (const auto& e : it) consider(e);
        } else {
            fs::directory_iterator it(dir, ec);
            HYDRA_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
            for (const auto& e : it) consider(e);
        }
    }
    std::sort(out.begin(), out.end(),
              [](const SourceFile& a, const SourceFile& b) { return a.name < b.name; });
    return out;
}

}  // namespace hydra
