// Thread count control for OpenMP loops and OpenBLAS (the OpenMP build of OpenBLAS shares the pool).
#pragma once

namespace hydra {

int num_threads();
// n <= 0 selects all hardware threads. Applies to our OpenMP loops and to OpenBLAS.
void set_num_threads(int n);

}  // namespace hydra
