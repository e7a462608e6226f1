// Opening an optional shared library at run time (dlopen): the first of several names that loads, a path
// from an environment variable tried first. For the CUDA libraries the build links no stub for (NCCL,
// cuDNN), so that a machine without them still runs everything else and says which names it tried.
#pragma once

#include <initializer_list>
#include <string>

namespace hydra {

struct OpenedLibrary {
    void* handle = nullptr;  // dlopen's handle (RTLD_NOW | RTLD_LOCAL), null when no name loaded
    std::string errors;      // dlerror() of each name tried, "; "-separated
};

// Tries getenv(env_var) when it is set and non-empty, then `names` in order; never throws.
OpenedLibrary open_first_library(const char* env_var, std::initializer_list<const char*> names);

}  // namespace hydra
