#!/usr/bin/env bash
# The whole GPU test suite (tests/gpu, CTest label gpu) on the offline GPU machine, in one call: builds
# hydra and hydra_gpu_tests with CMake from the carried Debian sysroot (tools/gpu_build.sh build), then
# runs `ctest -L gpu` and ends with ctest's summary. The cases that need the real model run when it is
# there ($HYDRA_MODEL: env.sh points it at $PREFIX/models/, where tools/gpu_build.sh model assembles the
# GGUF) and are skipped otherwise.
#
# here, once:  tools/gpu_build.sh fetch            (.devdeps/gpu: the sysroot with GoogleTest, the data)
# there, one call, carry .devdeps/gpu:             tools/gpu_test.sh [ctest arguments, e.g. -R GpuOps]
# with the real model, two calls in a row (a warm machine keeps /tmp for ~30 s):
#   call 1, carry .devdeps/gpu .devdeps/gguf_1:    tools/gpu_test.sh   (keeps part 1 of the model too)
#   call i, carry .devdeps/gguf_i:                 tools/gpu_test.sh   (keeps part i; the call with the last
#                                                  part assembles the model; reuses the build)
# CTEST_JOBS: tests at once on the one GPU (default 8; each CPU reference gets nproc / CTEST_JOBS OpenMP
# threads). Logs go to $OUT (or ./gpu_test_results): build.log and ctest's LastTest.log.
# Exit status: ctest's (0: every test passed or was skipped), 3 when the build failed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 3
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
RES="${OUT:-$ROOT/gpu_test_results}"
mkdir -p "$RES"
JOBS="${CTEST_JOBS:-8}"
t_start=$(date +%s)
stamp() { echo "[gpu_test] $(( $(date +%s) - t_start )) s: $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4

if [[ -f .devdeps/gpu/sysroot.tar.xz ]]; then
  stamp "building hydra and hydra_gpu_tests (log: build.log)"
  HYDRA_GPU_TARGETS="hydra hydra_gpu_tests" tools/gpu_build.sh build > "$RES/build.log" 2>&1 \
    || { tail -40 "$RES/build.log"; echo "[gpu_test] build failed"; exit 3; }
elif [[ -f "$PREFIX/env.sh" && -f "$PREFIX/build/build.ninja" ]]; then
  # a later call on a warm machine without the sysroot: the build there, brought up to date
  stamp "no .devdeps/gpu carried: updating the build in $PREFIX/build"
  # shellcheck disable=SC1091
  (source "$PREFIX/env.sh" && ninja -C "$PREFIX/build" hydra hydra_gpu_tests) > "$RES/build.log" 2>&1 \
    || { tail -40 "$RES/build.log"; echo "[gpu_test] build failed"; exit 3; }
else
  echo "[gpu_test] no build here and no .devdeps/gpu carried: run tools/gpu_build.sh fetch, carry .devdeps/gpu"
  exit 3
fi
tail -1 "$RES/build.log"

# the model, when its parts come along (tools/gpu_build.sh: part 1 with call 1, one part per later call)
if compgen -G ".devdeps/gguf_[0-9]*/part" >/dev/null; then
  tools/gpu_build.sh stash
  tools/gpu_build.sh model 2>/dev/null || echo "[gpu_test] the model is not complete yet: its cases will be skipped"
fi

# shellcheck disable=SC1091
source "$PREFIX/env.sh"
[[ -f "$HYDRA_MODEL" ]] || echo "[gpu_test] no model at $HYDRA_MODEL: the real-model cases will be skipped"
threads=$(( $(nproc) / JOBS ))
stamp "ctest -L gpu -j $JOBS (OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 )))"
cd "$PREFIX/build" || exit 3
OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 )) ctest -L gpu --output-on-failure -j "$JOBS" --timeout 1200 "$@"
rc=$?
cp Testing/Temporary/LastTest.log "$RES/" 2>/dev/null
exit "$rc"  # nothing printed after ctest: its summary is the call's last lines
