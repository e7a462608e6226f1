// dlopen of the first name that loads (see shared_library.h).
#include "core/shared_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace hydra {

OpenedLibrary open_first_library(const char* env_var, std::initializer_list<const char*> names) {
    std::vector<std::string> tries;
    if (const char* env = env_var ? std::getenv(env_var) : nullptr; env && *env) tries.emplace_back(env);
    for (const char* n : names) tries.emplace_back(n);
    OpenedLibrary r;
    for (const auto& n : tries) {
        r.handle = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (r.handle) break;
        const char* e = dlerror();
        r.errors += (r.errors.empty() ? "" : "; ") + std::string(e ? e : n);
    }
    return r;
}

}  // namespace hydra
