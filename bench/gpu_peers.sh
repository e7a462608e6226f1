#!/usr/bin/env bash
# One GPU run, in one command: build our CUDA benchmark and the GPU tests with CMake, the GDN and attention
# cases of the GPU op table (tests/gpu: parity against the CPU reference), our benchmarks, then the peers
# at the same shapes (flash-linear-attention from its source at $FLA_PATH, PyTorch SDPA) and a table of
# ratios (peer ms / our ms; above 1 means ours is faster).
#
# Usage, from the repo root on the GPU machine:  bench/gpu_peers.sh [--quick]
# Build: with .devdeps/gpu carried (tools/gpu_build.sh fetch: the offline GPU machine) through
# tools/gpu_build.sh build into /tmp/hydra_gpu/build; else a plain CMake build into ${BUILD_DIR:-build-cuda}
# (a machine with the Debian dependencies installed, tools/setup.sh).
# Needs: python3 with torch + triton, the fla source tree at ${FLA_PATH:-.peer}/fla (fetched into a
# git-ignored folder, never committed). Results (logs, JSON) go to ${OUT:-<build>/results}.
# Exit status: that of the parity tests (nonzero on any parity failure); 3 when the build fails.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
QUICK="${1:-}"
TARGETS="cuda_gdn_attention_bench hydra_gpu_tests"
export FLA_PATH="${FLA_PATH:-$ROOT/.peer}"
export PYTHONUNBUFFERED=1

if [[ -f .devdeps/gpu/sysroot.tar.xz ]]; then
  BUILD="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}/build"
  RES="${OUT:-$BUILD/results}"
  mkdir -p "$RES"
  HYDRA_GPU_TARGETS="$TARGETS" tools/gpu_build.sh build > "$RES/build.log" 2>&1 \
    || { tail -40 "$RES/build.log"; echo "[gpu_peers] build failed"; exit 3; }
  # shellcheck disable=SC1091
  source "$(dirname "$BUILD")/env.sh"
else
  BUILD="${BUILD_DIR:-$ROOT/build-cuda}"
  RES="${OUT:-$BUILD/results}"
  mkdir -p "$RES"
  { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYDRA_CUDA=ON -DHYDRA_TESTS=ON \
      && cmake --build "$BUILD" --target $TARGETS; } > "$RES/build.log" 2>&1 \
    || { tail -40 "$RES/build.log"; echo "[gpu_peers] build failed"; exit 3; }
  # cuDNN for ops/cuda/cudnn_attention (loaded at run time): PyTorch's wheel brings libcudnn_graph.so.9
  if [[ -z "${HYDRA_CUDNN_LIB:-}" ]]; then
    cudnn_dir=$(tools/cudnn_lib_dir.sh)
    [[ -n "$cudnn_dir" ]] && export LD_LIBRARY_PATH="$cudnn_dir:${LD_LIBRARY_PATH:-}"
  fi
fi
tail -1 "$RES/build.log"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used \
  --format=csv 2>&1 | tee "$RES/gpu.txt"
nvcc --version 2>/dev/null | tail -1 | tee -a "$RES/gpu.txt"

# --quick: the GDN cases alone
filter='Table/GpuOps.Parity/gdn_*:Table/GpuOps.Parity/attention*'
[[ -n "$QUICK" ]] && filter='Table/GpuOps.Parity/gdn_*'
echo "== op parity: $filter (CPU float reference, relative RMS) =="
timeout "${STEP_TIMEOUT:-300}" "$BUILD/hydra_gpu_tests" --gtest_filter="$filter" 2>&1 | tee "$RES/parity.txt"
parity_rc=${PIPESTATUS[0]}

echo "== our kernels =="
timeout "${STEP_TIMEOUT:-300}" "$BUILD/cuda_gdn_attention_bench" $QUICK 2>&1 | tee "$RES/ours.jsonl"

echo "== peers (same run) and ratios =="
python3 bench/cuda_peers.py --ours "$RES/ours.jsonl" $QUICK --json "$RES/summary.json" 2>&1 | tee "$RES/peers.txt"

echo "== parity summary =="
grep -E "^\[  (PASSED|FAILED) |suites? ran" "$RES/parity.txt" || true
exit "$parity_rc"
