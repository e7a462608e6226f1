#!/usr/bin/env bash
# The inference prefill attention on the offline GPU machine, in one call after a build that has the GPU
# suite and the benchmark (tools/gpu_build.sh build with HYDRA_GPU_TARGETS="hydra hydra_gpu_tests
# gpu_prefill_bench"):
#   tools/gpu_prefill_run.sh [OUT_DIR]     (default $OUT, else /tmp/hydra_prefill)
# 1. the GPU suite's prefill cases: PrefillAttention against the CPU reference (cuDNN and our kernels,
#    pos0 = 0 and continued chunks) and GpuForward's chunked prefill against one prefill (the real-model case
#    needs the model: tools/gpu_build.sh model first, else it is skipped) -> tests.log;
# 2. bench/gpu_prefill_bench.cpp -> ours.jsonl (table: ours.txt), then bench/peer_prefill_sdpa.py (PyTorch
#    SDPA and transformers' Llama at the same shapes, same call) -> peer.jsonl + the joined table, summary.json.
# cuDNN: PyTorch's wheel under $HYDRA_TORCH_PYTHON (default /opt/torch/.venv/bin/python), put on
# LD_LIBRARY_PATH so that ours and PyTorch's run the same library. Exit status: 1 if a test or a run failed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
PY="${HYDRA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
out="${1:-${OUT:-/tmp/hydra_prefill}}"
mkdir -p "$out"
[[ -f "$PREFIX/env.sh" && -x "$PREFIX/build/hydra_gpu_tests" && -x "$PREFIX/build/gpu_prefill_bench" ]] || {
  echo "[gpu_prefill_run] no build in $PREFIX: HYDRA_GPU_TARGETS=\"hydra hydra_gpu_tests gpu_prefill_bench\" tools/gpu_build.sh build" >&2
  exit 2; }
# shellcheck disable=SC1091
source "$PREFIX/env.sh"
d=$(HYDRA_TORCH_PYTHON="$PY" "$ROOT/tools/cudnn_lib_dir.sh")
[[ -n "$d" ]] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
echo "[gpu_prefill_run] cuDNN from: ${d:-none found}"
status=0
"$PREFIX/build/hydra_gpu_tests" \
  --gtest_filter='Gpu/PrefillAttentionParity.*:PrefillAttentionArgs.*:GpuForwardChunks/*:GpuForwardChunks.*' \
  > "$out/tests.log" 2>&1 || status=1
grep -E '^\[  (PASSED|FAILED|  SKIPPED) |^\[==========\]|Failure|cuDNN [0-9]|chunks' "$out/tests.log" | head -80
"$PREFIX/build/gpu_prefill_bench" > "$out/ours.jsonl" 2> "$out/ours.txt" || status=1
cat "$out/ours.txt"
"$PY" "$ROOT/bench/peer_prefill_sdpa.py" --ours "$out/ours.jsonl" --json "$out/summary.json" > "$out/peer.txt" 2>&1 \
  || status=1
grep -v '^{' "$out/peer.txt"
grep '^{' "$out/peer.txt" > "$out/peer.jsonl" || true
exit $status
