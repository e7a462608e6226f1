// OpenBLAS kernel choice on CPUs newer than the library (see blas_kernels.h).
#include "core/blas_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/restart_self.h"

namespace hydra {

SimdLevel cpu_simd_level() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return SimdLevel::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
    if (__builtin_cpu_supports("avx")) return SimdLevel::kAvx;
#endif
    return SimdLevel::kSse;
}

int blas_core_level(std::string_view core_name) {
    std::string name(core_name);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    // OpenBLAS's x86-64 targets by the widest instructions their single-precision kernels use
    static const std::pair<std::string_view, int> kLevels[] = {
        {"prescott", 0},       {"core2", 0},       {"penryn", 0},    {"dunnington", 0},   {"nehalem", 0},
        {"atom", 0},           {"nano", 0},        {"opteron", 0},   {"opteron_sse3", 0}, {"barcelona", 0},
        {"bobcat", 0},         {"sandybridge", 1}, {"bulldozer", 1}, {"piledriver", 1},   {"steamroller", 1},
        {"excavator", 2},      {"haswell", 2},     {"zen", 2},       {"skylakex", 3},     {"cooperlake", 3},
        {"sapphirerapids", 3},
    };
    for (const auto& [n, level] : kLevels)
        if (name == n) return level;
    return -1;
}

std::string blas_core_override(std::string_view detected, SimdLevel cpu) {
    const int have = blas_core_level(detected);
    if (have < 0 || have >= int(cpu)) return "";
    switch (cpu) {
        case SimdLevel::kAvx512:
            return "SkylakeX";
        case SimdLevel::kAvx2:
            return "Haswell";
        case SimdLevel::kAvx:
            return "Sandybridge";
        case SimdLevel::kSse:
            return "";
    }
    return "";
}

void ensure_blas_kernels(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE")) return;  // the caller's choice, or ours after the restart
    const char* detected = openblas_get_corename();
    const std::string core = blas_core_override(detected ? detected : "", cpu_simd_level());
    if (core.empty() || setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
    restart_self(argv);  // returns only on failure
    std::fprintf(stderr,
                 "hydra: OpenBLAS runs its %s kernels on a CPU with wider vectors and the restart with "
                 "OPENBLAS_CORETYPE=%s failed; set it yourself for faster CPU matrix products\n",
                 detected ? detected : "?", core.c_str());
}

}  // namespace hydra
