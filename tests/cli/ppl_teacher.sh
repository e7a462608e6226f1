#!/usr/bin/env bash
# CLI checks of `hydra ppl MODEL --teacher T` (run by CTest with the built hydra; skipped, rc 77, without
# the default model): the teacher against itself agrees exactly (KL 0, top-1 1, ratio 1); a fresh 7:1
# conversion is far from it, and its JSON holds the printed figures inside their intervals, ppl / teacher
# equal to the ratio of the two perplexities; the same plan with the fusion's LA offsets starts at under half
# its KL (--la-bias with --fusion none is refused); a teacher of another vocabulary, --shards without --teacher
# and --text with --shards are refused with messages naming the problem.
#   tests/cli/ppl_teacher.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROSE="$ROOT/.cache/prose/austen_persuasion.txt"
MODEL="$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] && [ -f "$PROSE" ] || { echo "skip: default model or prose missing (tools/setup.sh)"; exit 77; }
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))" "$@"; }

"$HYDRA" ppl "$MODEL" --teacher "$MODEL" --text "$PROSE" --tokens 512 --ctx 256 --json "$W/self.json" -t 2 >"$W/o" 2>&1
check "the teacher against itself runs" test $? -eq 0
check "it prints the KL line" contains "$W/o" "KL(teacher || model) 0.0000"
check "KL 0, top-1 1, ratio 1 in the JSON" test "$(jget "$W/self.json" "(kl, top1_agreement, ppl_ratio, tokens, windows)")" = "(0.0, 1.0, 1.0, 512, 2)"

"$HYDRA" convert "$MODEL" --ratio 7:1 --select random --seed 3 --calib-tokens 256 --out "$W/h71" -t 2 >"$W/c" 2>&1
check "a 7:1 conversion" test $? -eq 0
"$HYDRA" ppl "$W/h71" --teacher "$MODEL" --text "$PROSE" --tokens 512 --ctx 256 --json "$W/h.json" -t 2 >"$W/o" 2>&1
check "the conversion against its teacher runs" test $? -eq 0
check "an untrained conversion is far from its teacher (KL > 1)" test "$(jget "$W/h.json" "kl > 1 and top1_agreement < 0.5")" = True
check "each figure lies inside its interval" test "$(jget "$W/h.json" \
  "all(d[k+'_ci']['lo'] <= d[k] <= d[k+'_ci']['hi'] for d in [dict(kl=kl, kl_ci=kl_ci, ppl=ppl, ppl_ci=ppl_ci, top1_agreement=top1_agreement, top1_agreement_ci=top1_agreement_ci)] for k in ['kl', 'ppl', 'top1_agreement'])")" = True
check "ppl / teacher is the ratio of the perplexities" test "$(jget "$W/h.json" "abs(ppl_ratio - ppl / teacher_ppl) <= 1e-4 * ppl_ratio")" = True
check "the teacher's perplexity is the one it has against itself" test "$(jget "$W/h.json" "teacher_ppl")" = "$(jget "$W/self.json" "ppl")"
check "the JSON names model, teacher and source" test "$(jget "$W/h.json" "(model.endswith('h71'), teacher == '$MODEL', source == '$PROSE', window)")" = "(True, True, True, 256)"

# The fusion's LA offsets (--la-bias): the same plan starts far closer to its teacher.
"$HYDRA" convert "$MODEL" --ratio 7:1 --select random --seed 3 --calib-tokens 256 --la-bias --out "$W/h71b" -t 2 >"$W/c" 2>&1
check "a 7:1 conversion with LA offsets" test $? -eq 0
check "it says so" contains "$W/c" "with LA offsets"
"$HYDRA" ppl "$W/h71b" --teacher "$MODEL" --text "$PROSE" --tokens 512 --ctx 256 --json "$W/hb.json" -t 2 >"$W/o" 2>&1
check "the offsets' conversion against its teacher runs" test $? -eq 0
check "with offsets the KL is under half the plain conversion's" test "$(python3 -c "import json; a=json.load(open('$W/h.json'))['kl']; b=json.load(open('$W/hb.json'))['kl']; print(b < 0.5 * a)")" = True
"$HYDRA" convert "$MODEL" --ratio 7:1 --select random --fusion none --la-bias --out "$W/h71n" -t 2 >"$W/o" 2>&1; rc=$?
check "--la-bias with --fusion none is refused" test "$rc" -ne 0 -a "$(grep -c -- "--la-bias" "$W/o")" -gt 0

"$HYDRA" ppl "$ROOT/tests/data/tiny_hf/llama" --teacher "$MODEL" --text "$PROSE" --tokens 64 >"$W/o" 2>&1; rc=$?
check "a teacher of another vocabulary is refused" test "$rc" -ne 0
check "the refusal names the vocabulary" contains "$W/o" "the KL needs the same vocabulary"
"$HYDRA" ppl "$MODEL" --shards "$W" >"$W/o" 2>&1; rc=$?
check "--shards without --teacher is refused" test "$rc" -ne 0 -a "$(grep -c -- "--teacher" "$W/o")" -gt 0
"$HYDRA" ppl "$MODEL" --teacher "$MODEL" --text "$PROSE" --shards "$W" >"$W/o" 2>&1; rc=$?
check "--text with --shards is refused" test "$rc" -ne 0 -a "$(grep -c "excludes" "$W/o")" -gt 0
"$HYDRA" ppl "$MODEL" --teacher "$MODEL" --shards "$W/none" >"$W/o" 2>&1; rc=$?
check "a missing shards directory is refused, named" test "$rc" -ne 0 -a "$(grep -c "$W/none" "$W/o")" -gt 0
exit $((fails > 0))
