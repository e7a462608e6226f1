#!/usr/bin/env bash
# CLI checks of `hydra pipeline --gpus N` (run by CTest with the built hydra): every training stage runs
# as `hydra train ... --gpus N` in a process of its own. With N = 1 on the CPU the stages' weights must be
# byte-identical to the same pipeline trained in one process, fresh and resumed (a stage grown from 1 to 2
# steps continues its checkpoint in the child); N > 1 on the CPU is refused with a clear message.
#   tests/cli/pipeline_gpus.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
[ -f "$ROOT/.cache/prose/austen_emma.txt" ] || { echo "prose cache missing (tools/setup.sh): skipped"; exit 77; }
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"
same_file() { [ "$(sha256sum < "$1")" = "$(sha256sum < "$2")" ]; }
step_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$1"; }

# a miniature of the tiny-cpu preset: a 3-step teacher and one hybrid trained by distill alone
mini=(teacher_train.run.steps=3 teacher_train.data.batch_size=2 distill.data.batch_size=2 distill.run.steps=1
      'eval.tasks=["passkey"]' 'eval.lengths=[256]' eval.samples=1 eval.heldout_tokens=300
      'variants=[{"name":"h","select":"random","ratio":"1:1","stages":["distill"]}]')
pipe() {  # pipe OUT LOG [args...]
  local out="$1" log="$2"; shift 2
  "$HYDRA" pipeline --preset tiny-cpu --threads 2 --out "$out" "${mini[@]}" "$@" >"$log" 2>&1
}

pipe "$W/one" "$W/one.log"; rc=$?
check "in one process: succeeds" test "$rc" -eq 0
pipe "$W/proc" "$W/proc.log" --gpus 1; rc=$?
check "--gpus 1: succeeds" test "$rc" -eq 0
check "--gpus 1: each stage ran as hydra train" contains "$W/proc.log" "hydra train $W/proc/h/distill.train_config.json --out $W/proc/h/distill --device cpu --gpus 1"
check "--gpus 1: the stage config is kept beside its directory" test -s "$W/proc/h/distill.train_config.json"
check "--gpus 1: teacher weights equal the one-process run's" same_file "$W/one/teacher/model.safetensors" "$W/proc/teacher/model.safetensors"
check "--gpus 1: distilled weights equal the one-process run's" same_file "$W/one/h/distill/model.safetensors" "$W/proc/h/distill/model.safetensors"
check "--gpus 1: the report is written" test -s "$W/proc/report.md"

# the distill stage grown to 2 steps: both runs continue their step-1 checkpoints
pipe "$W/one" "$W/one2.log" distill.run.steps=2; rc=$?
check "grown stage in one process: succeeds" test "$rc" -eq 0
pipe "$W/proc" "$W/proc2.log" distill.run.steps=2 --gpus 1; rc=$?
check "grown stage, --gpus 1: succeeds" test "$rc" -eq 0
check "grown stage, --gpus 1: resumed in the child" contains "$W/proc2.log" "hydra train --resume $W/proc/h/distill --steps 2"
check "grown stage, --gpus 1: at step 2" test "$(step_of "$W/proc/h/distill/state.json")" = 2
check "grown stage, --gpus 1: weights equal the one-process run's" same_file "$W/one/h/distill/model.safetensors" "$W/proc/h/distill/model.safetensors"

pipe "$W/two" "$W/two.log" --gpus 2; rc=$?
check "--gpus 2 on the CPU: refused" test "$rc" -eq 1
check "--gpus 2 on the CPU: says why" contains "$W/two.log" "--gpus 2 trains on the GPUs: give --device cuda"

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
