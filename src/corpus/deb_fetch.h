// `hydra corpus fetch`: the catalog's Debian packages, downloaded once with `apt-get download` into
// <cache>/debs/ and unpacked with `dpkg-deb -x` into <cache>/extract/<package>/ (source tarballs inside a
// package, e.g. linux-source's, unpacked next to them under unpacked/). Nothing is installed, so it
// needs no root and pulls no dependencies. Once the cache holds a package, no network is used for it:
// later fetches and builds work offline. <cache>/fetch.json records each package's version, .deb file
// and sha256.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "corpus/corpus_sources.h"

namespace hydra {

struct FetchedPackage {
    std::string name, version, deb_file;  // deb_file: name inside <cache>/debs
    std::string deb_sha256;
    int64_t deb_bytes = 0;
    std::string extract_dir;  // absolute
};

// Downloads what is missing (unless offline: then a missing .deb is an error naming the package) and
// unpacks what is not unpacked yet (into a temporary directory renamed into place, so an interrupted
// fetch never leaves a half tree). Throws hydra::Error naming the .deb for a file dpkg-deb rejects
// (corrupt or truncated download) and naming the command for a failed apt-get or tar.
std::vector<FetchedPackage> fetch_packages(const std::vector<PackageSpec>& packages,
                                           const std::string& cache_dir, bool offline);

// What fetch_packages recorded in <cache>/fetch.json, for the build: every listed package must be there
// and unpacked. Throws naming the package and `hydra corpus fetch` otherwise.
std::vector<FetchedPackage> read_fetched_packages(const std::vector<PackageSpec>& packages,
                                                  const std::string& cache_dir);

// Runs argv (no shell) and returns its exit status; stdout captured into *out when given.
int run_command(const std::vector<std::string>& argv, std::string* out = nullptr);

}  // namespace hydra
