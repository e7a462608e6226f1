#!/usr/bin/env bash
# The GPU serving backend (src/gpu/gpu_batch_backend.h) on the offline GPU machine: its tests and its
# benchmark, on top of tools/gpu_build.sh (read it for what is carried). Calls in a row (a warm machine keeps
# /tmp/hydra_gpu between calls):
#   call 1, carry .devdeps/gpu .devdeps/gguf_a:  tools/gpu_batch_run.sh test
#       builds hydra, hydra_gpu_tests and gpu_batch_decode_bench, keeps part a of the model, runs the batched
#       decode kernels' and the backend's tests (random weights; the real-model case is skipped)
#   call 2:                                      tools/gpu_batch_run.sh bench [gpu_batch_decode_bench arguments]
#       the batched decode step against batch size and context (JSON lines)
#   call 3, carry .devdeps/gguf_b:               tools/gpu_batch_run.sh model
#       assembles the model, runs the backend's real-model case (teacher and its 7:1 conversion)
# The whole GPU suite (tools/gpu_test.sh) covers the kernels this backend shares with the one-sequence path.
# Logs under $OUT (or ./gpu_batch_results): build.log, tests.log, model_tests.log, gpu_batch_decode.jsonl.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 3
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
RES="${OUT:-$ROOT/gpu_batch_results}"
mkdir -p "$RES"
mode="${1:-}"
shift || true
need_build() {
  [[ -f "$PREFIX/env.sh" && -x "$PREFIX/build/hydra_gpu_tests" ]] || {
    echo "[gpu_batch] no build in $PREFIX: run 'tools/gpu_batch_run.sh test' first (carry .devdeps/gpu)"; exit 3; }
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
}
case "$mode" in
test)
  HYDRA_GPU_TARGETS="hydra hydra_gpu_tests gpu_batch_decode_bench" tools/gpu_build.sh build > "$RES/build.log" 2>&1 \
    || { tail -40 "$RES/build.log"; echo "[gpu_batch] build failed"; exit 3; }
  tail -1 "$RES/build.log"
  [[ -f .devdeps/gguf_a/part ]] && tools/gpu_build.sh stash
  need_build
  "$PREFIX/build/hydra_gpu_tests" --gtest_filter='GpuBatchDecodeOps.*:GpuBatchBackend*' > "$RES/tests.log" 2>&1
  rc=$?
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\]|exact|rel RMS|graphs vs eager|top-1' "$RES/tests.log" | tail -80
  tail -3 "$RES/tests.log"
  exit "$rc"
  ;;
bench)
  need_build
  ninja -C "$PREFIX/build" gpu_batch_decode_bench > "$RES/bench_build.log" 2>&1 || { tail -20 "$RES/bench_build.log"; exit 3; }
  "$PREFIX/build/gpu_batch_decode_bench" "$@" | tee "$RES/gpu_batch_decode.jsonl"
  exit "${PIPESTATUS[0]}"
  ;;
model)
  need_build
  tools/gpu_build.sh model || exit 3
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  "$PREFIX/build/hydra_gpu_tests" --gtest_filter='GpuBatchBackend.RealModel*' > "$RES/model_tests.log" 2>&1
  rc=$?
  grep -E '^\[ *(OK|FAILED|SKIPPED) *\]|rel RMS|top-1|Failure|Expected|Which is' "$RES/model_tests.log" | tail -40
  exit "$rc"
  ;;
*)
  sed -n '2,15p' "$0"
  exit 2
  ;;
esac
