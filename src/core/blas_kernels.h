// Which OpenBLAS kernels run. OpenBLAS picks them from the CPU's model number while it loads; a model
// newer than the library (Debian 12's 0.3.21 does not know family 6 model 207, Emerald Rapids) gets the
// SSE3 "Prescott" kernels, which ran the CPU prefill's GEMMs 4x slower than the AVX-512 ones on such a
// machine. OPENBLAS_CORETYPE names the kernels instead, but it is read only while the library loads,
// before main: a program that finds weaker kernels than its CPU runs therefore sets it and executes
// itself again, once (ensure_blas_kernels). OPENBLAS_CORETYPE set by the caller is always kept.
#pragma once

#include <string>
#include <string_view>

namespace hydra {

// The widest vector instructions a CPU (or a set of OpenBLAS kernels) uses.
enum class SimdLevel { kSse = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };

// This CPU's level (AVX-512: F, BW, DQ, VL; AVX2: with FMA).
SimdLevel cpu_simd_level();

// The level of an OpenBLAS core name as openblas_get_corename() reports it (any case); -1 when the name
// is not one this code knows, which is then never overridden.
int blas_core_level(std::string_view core_name);

// The OPENBLAS_CORETYPE to run on a CPU of level `cpu` when OpenBLAS chose `detected`: "" to keep it.
std::string blas_core_override(std::string_view detected, SimdLevel cpu);

// At the start of main: when OpenBLAS runs weaker kernels than this CPU supports and the caller set no
// OPENBLAS_CORETYPE, executes the program again with it set (argv unchanged). Returns only when nothing
// needs to change or the execution failed (then a line on stderr, and the program runs as it is).
void ensure_blas_kernels(char** argv);

}  // namespace hydra
