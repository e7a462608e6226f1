#!/usr/bin/env bash
# CLI check of `--quantize-weights` (run by CTest with the built hydra): a hybrid converted from the default
# model (f32 safetensors) decodes from Q8_0 copies of its linear weights when asked, the quantized GGUF teacher
# needs none (its own copies are kept), and an unknown mode is refused. Skipped (77) without the model.
#   tests/cli/quantize_weights.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="${HYDRA_MODEL:-$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$MODEL" ] || { echo "skip: $MODEL absent (tools/setup.sh fetches it)"; exit 77; }
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"

"$HYDRA" convert "$MODEL" --ratio 7:1 --select random --calib-tokens 64 --out "$W/h" >"$W/conv" 2>&1
check "a 7:1 hybrid is converted" test -f "$W/h/model.safetensors"
gen() {  # gen MODEL OUT [options]: 8 greedy tokens
  local m=$1 out=$2
  shift 2
  "$HYDRA" generate "$m" -p "The capital of France is" -n 8 --temp 0 --threads 2 "$@" >"$out" 2>"$out.err"
}
gen "$W/h" "$W/q8" --quantize-weights q8_0
check "the hybrid decodes from Q8_0 copies" test $? -eq 0
check "it says how many weights it quantized" grep -qE "quantized [1-9][0-9]* linear weights to Q8_0" "$W/q8.err"
gen "$W/h" "$W/f32"
check "without the option nothing is quantized" test $? -eq 0 -a -s "$W/f32"
check "... and it says nothing of it" test -z "$(grep -l 'linear weights to Q8_0' "$W/f32.err")"
gen "$MODEL" "$W/gguf" --quantize-weights q8_0
check "the GGUF teacher keeps its own quantized copies" contains "$W/gguf.err" "quantized 0 linear weights"
gen "$W/h" "$W/bad" --quantize-weights q4
check "an unknown mode is refused" test $? -ne 0
check "the refusal names the option" contains "$W/bad.err" "--quantize-weights"
exit $((fails > 0))
