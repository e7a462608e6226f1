#!/usr/bin/env bash
# Sets up a fresh machine (tools/setup.sh: Debian packages, default model, prose cache) if needed,
# builds HydraHead with its tests, and runs the whole suite through CTest. Used by .ci/run.
# When nvcc is on PATH it also checks that the CUDA backend configures and compiles (it cannot run
# here: the GPU suite runs on the GPU machine).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/tools/setup.sh" --no-build
JOBS="$(nproc)"
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYDRA_TESTS=ON
cmake --build "$ROOT/build" -j"$JOBS"
if command -v nvcc >/dev/null 2>&1; then
  echo "[test] nvcc found: compiling the CUDA backend (-DHYDRA_CUDA=ON)"
  cmake -S "$ROOT" -B "$ROOT/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYDRA_CUDA=ON -DHYDRA_TESTS=OFF \
    -DHYDRA_BENCH=OFF >/dev/null
  cmake --build "$ROOT/build-cuda" -j"$JOBS" --target hydra_cuda
fi
cd "$ROOT/build"
ctest --output-on-failure -j1 --timeout 900
