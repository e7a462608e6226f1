#!/usr/bin/env bash
# One GPU run, in one command: build our CUDA programs (tools/device_build.sh; skipped when
# build-device/ is current for these sources and its binaries load), op parity against the CPU
# reference, our benchmarks, then the peers at the same shapes (flash-linear-attention from its source
# at $FLA_PATH, PyTorch SDPA) and a table of ratios (peer ms / our ms; above 1 means ours is faster).
#
# Usage, from the repo root on the GPU machine:  bench/gpu_peers.sh [--quick]
# Needs: nvcc, python3 with torch + triton, the fla source tree at ${FLA_PATH:-.peer}/fla (fetched into a
# git-ignored folder, never committed), and .devdeps/ (tools/device_build.sh --fetch) when the machine
# has no fmt headers. Results (logs, JSON) go to ${OUT:-build-device/results}.
# Exit status: that of the parity program (nonzero on any parity failure).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
QUICK="${1:-}"
BUILD="${BUILD_DIR:-$ROOT/build-device}"
RES="${OUT:-$BUILD/results}"
mkdir -p "$RES"
export FLA_PATH="${FLA_PATH:-$ROOT/.peer}"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu,memory.used \
  --format=csv 2>&1 | tee "$RES/gpu.txt"
nvcc --version | tail -1 | tee -a "$RES/gpu.txt"

stamp_now=$(cat src/core/error.cpp src/ops/cpu/attention.cpp src/ops/cpu/gdn_recurrence.cpp src/ops/cpu/l2norm.cpp \
  bench/cuda_gemm_shim.cc src/ops/cuda/gdn_chunk.cu src/ops/cuda/attention.cu src/ops/cuda/cudnn_attention.cu bench/cuda_op_parity.cu \
  bench/cuda_gdn_attention_bench.cu src/ops/cuda/*.h src/ops/cuda/*.cuh src/ops/cpu/*.h src/core/error.h \
  src/core/gemm.h | sha256sum | cut -d' ' -f1)
need_build=1
if [[ -x "$BUILD/cuda_op_parity" && -x "$BUILD/cuda_gdn_attention_bench" && -f "$BUILD/.stamp" ]] &&
   [[ "$(cat "$BUILD/.stamp")" == "$stamp_now" ]] &&
   ! ldd "$BUILD/cuda_op_parity" "$BUILD/cuda_gdn_attention_bench" | grep -q "not found"; then
  need_build=0
  echo "[gpu_peers] build-device is current for these sources: not rebuilding"
fi
if (( need_build )); then
  BUILD_DIR="$BUILD" tools/device_build.sh 2>&1 | tee "$RES/build.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "[gpu_peers] build failed"; exit 3; }
fi

# cuDNN for ops/cuda/cudnn_attention (loaded at run time): PyTorch's wheel brings libcudnn_graph.so.9
if [[ -z "${HYDRA_CUDNN_LIB:-}" ]]; then
  cudnn_dir=$(tools/cudnn_lib_dir.sh)
  [[ -n "$cudnn_dir" ]] && export LD_LIBRARY_PATH="$cudnn_dir:${LD_LIBRARY_PATH:-}"
fi

echo "== op parity (CPU float reference, relative RMS, tol 1e-2) =="
timeout "${STEP_TIMEOUT:-300}" "$BUILD/cuda_op_parity" ${QUICK:+--quick} 2>&1 | tee "$RES/parity.txt"
parity_rc=${PIPESTATUS[0]}

echo "== our kernels =="
timeout "${STEP_TIMEOUT:-300}" "$BUILD/cuda_gdn_attention_bench" $QUICK 2>&1 | tee "$RES/ours.jsonl"

echo "== peers (same run) and ratios =="
python3 bench/cuda_peers.py --ours "$RES/ours.jsonl" $QUICK --json "$RES/summary.json" 2>&1 | tee "$RES/peers.txt"

echo "== parity summary =="
tail -n 40 "$RES/parity.txt" | grep -E "FAIL|passed" || true
exit "$parity_rc"
