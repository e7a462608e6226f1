#!/usr/bin/env bash
# `hydra pipeline --preset smollm2-gpu` on the offline GPU machine (one H200), in calls of at most ten
# minutes: the pipeline runs in its own process session on that machine, so it outlives a call, and
# every call waits on it for a while and brings back its results (report, plots, eval JSON, stage logs;
# never weights). The machine keeps its disk only while it stays warm (about 30 s between calls).
#
# here, once:   tools/gpu_build.sh fetch; tools/gpu_train_run.sh pack (the CUDA binaries, built here)
# here, before: tools/gpu_train_run.sh split (the model in two parts sized for the tree as it is now)
# call 1, carry .devdeps/gpu .devdeps/gguf_train_a .devdeps/gpu_train:   tools/gpu_pipeline_run.sh stage
#   the binaries and part a of the model (tools/gpu_train_run.sh stage), then the gradient parity of the
#   CUDA training step against the CPU reference (hydra_gpu_tests' GpuTrainStep cases on tiny and
#   SmolLM2-shaped models: CE, KL, align; and the engine)
# call 2 (within ~30 s), carry .devdeps/gguf_train_b:    tools/gpu_pipeline_run.sh start [key=value ...]
#   the model (checksum), the real-model parity (SKIP_PARITY=1: not), then the pipeline started in the
#   background into $PREFIX/pipeline; waits up to WAIT_SECONDS (default 500) and collects
# call 3... (each within ~30 s of the last):             tools/gpu_pipeline_run.sh wait
#   waits again and collects; exits 0 once the pipeline has finished (report.md written), 10 while it
#   is still running, the pipeline's status otherwise; after a good finish, the GPU forward against the
#   CPU's (hydra_gpu_tests' GpuForward.RealModel) on the teacher and each trained student
# Results go to $OUT (or ./gpu_pipeline_results).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
RES="${OUT:-$ROOT/gpu_pipeline_results}"
RUN="$PREFIX/${RUN_NAME:-pipeline}"  # RUN_NAME: another output directory (e.g. a short smoke run)
mkdir -p "$RES"
mode="${1:-}"
[[ $# -gt 0 ]] && shift
t_start=$(date +%s)
stamp() { echo "[gpu_pipeline_run] $(( $(date +%s) - t_start )) s: $*"; }

# Copies what the pipeline has produced so far (small files only) into $RES.
collect() {
  [[ -d "$RUN" ]] || return 0
  # one archive: variant directories have ':' in their names, which the transfer back refuses
  (cd "$RUN" && find . -type f \( -name '*.md' -o -name '*.png' -o -name '*.json' -o -name '*.jsonl' \) \
      ! -name 'tokenizer*.json' -size -20M -print0 | tar --null -T - -czf "$RES/results.tar.gz")
  cp "$RUN/report.md" "$RES/report.md" 2>/dev/null
  cp "$PREFIX/pipeline.log" "$RES/pipeline.log" 2>/dev/null
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader >> "$RES/gpu_samples.txt" 2>/dev/null
}

# Waits for the background pipeline up to $1 seconds; 0 = finished well, 10 = still running, else its status.
wait_pipeline() {
  local limit="$1" pid
  pid="$(cat "$PREFIX/pipeline.pid" 2>/dev/null)"
  [[ -n "$pid" ]] || { echo "[gpu_pipeline_run] no pipeline was started on this machine (a fresh machine?)"; return 3; }
  while kill -0 "$pid" 2>/dev/null; do
    if (( $(date +%s) - t_start >= limit )); then
      collect
      stamp "still running; last lines:"
      tr '\r' '\n' < "$PREFIX/pipeline.log" | grep -v '^\s*$' | tail -4
      return 10
    fi
    sleep 5
  done
  collect
  local rc
  rc="$(cat "$PREFIX/pipeline.rc" 2>/dev/null || echo 99)"  # 99: ended without a status (killed)
  stamp "pipeline finished, status $rc"
  tr '\r' '\n' < "$PREFIX/pipeline.log" | grep -v '^\s*$' | tail -20
  if [[ "$rc" == 0 && -x "$PREFIX/build/hydra_gpu_tests" && ! -f "$RES/forward_parity.log" ]]; then
    # GPU inference vs the CPU reference on the trained students (and the teacher): the test reads $HYDRA_MODEL
    stamp "forward parity of the trained models"
    for m in "$HYDRA_MODEL" "$RUN"/*/longctx; do
      echo "== $m"
      HYDRA_MODEL="$m" timeout "${FORWARD_PARITY_SECONDS:-150}" "$PREFIX/build/hydra_gpu_tests" \
        --gtest_filter='GpuForward.RealModel'
      echo "forward parity exit $?"
    done > "$RES/forward_parity.log" 2>&1
    grep -E '^== |logits rel|greedy|decode vs|CUDA graphs|^\[ +(OK|FAILED|SKIPPED) +\]|exit' "$RES/forward_parity.log" | tail -40
  fi
  return "$rc"
}

case "$mode" in
stage)
  tools/gpu_train_run.sh stage || exit $?
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$RES/gpu.txt" 2>&1
  stamp "parity (tiny and SmolLM2-shaped models)"
  timeout "${PARITY_SECONDS:-240}" "$PREFIX/build/hydra_gpu_tests" \
    --gtest_filter='Cases/GpuTrainStep.Parity/tiny_*:Cases/GpuTrainStep.Parity/smollm2_shape_*:GpuTrainEngine.*' \
    > "$RES/parity.log" 2>&1
  echo "parity exit $?" | tee -a "$RES/parity.log"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^\[  (PASSED|FAILED)  \]|suites? ran' "$RES/parity.log" | tail -40
  stamp "done"
  ;;
start)
  tools/gpu_train_run.sh model || exit 3
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  if [[ -z "${SKIP_PARITY:-}" ]]; then
    stamp "parity on the real model"
    timeout 120 "$PREFIX/build/hydra_gpu_tests" --gtest_filter='Cases/GpuTrainStep.Parity/smollm2_real_*' \
      > "$RES/parity_model.log" 2>&1
    echo "parity exit $?" | tee -a "$RES/parity_model.log"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^\[  (PASSED|FAILED)  \]|suites? ran' "$RES/parity_model.log" | tail -20
  fi
  stamp "pipeline started in the background"
  rm -rf "$RUN" "$PREFIX/pipeline.rc"
  args=""
  (( $# )) && args="$(printf '%q ' "$@")"  # the overrides, quoted for the inner shell
  # In its own session, so the call returning does not end it; the inner shell records its pid and
  # the pipeline's status (pipeline.rc).
  setsid bash -c "echo \$\$ > '$PREFIX/pipeline.pid'; cd '$ROOT' && hydra pipeline --preset smollm2-gpu \
      --out '$RUN' 'teacher=$HYDRA_MODEL' 'score.file=$ROOT/docs/results/smollm2_scores/scores.json' $args \
      > '$PREFIX/pipeline.log' 2>&1; echo \$? > '$PREFIX/pipeline.rc'" < /dev/null > /dev/null 2>&1 &
  sleep 3
  wait_pipeline "${WAIT_SECONDS:-500}"
  exit $?
  ;;
wait)
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh" 2>/dev/null
  wait_pipeline "${WAIT_SECONDS:-560}"
  exit $?
  ;;
*)
  sed -n '2,20p' "$0"
  exit 2
  ;;
esac
