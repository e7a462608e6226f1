#!/usr/bin/env bash
# CLI checks of issue 37 (run by CTest with the built hydra): --out of unrelated files is refused and
# kept, --force replaces it, a trailing slash works, --steps 0 gives a readable range error, `hydra ppl
# --ctx` above the model's context is refused, and a mistyped command or key gets a suggestion. Seconds:
# a few steps of the test-micro preset on one thread.
#   tests/cli/safe_output.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROSE="$ROOT/.cache/prose/austen_persuasion.txt"
MODEL="$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"

# A mistyped command names itself and the nearest command; no command prints the help.
"$HYDRA" evall >"$W/o" 2>&1; rc=$?
check "a mistyped command is refused" test "$rc" -ne 0
check "the refusal suggests the command" contains "$W/o" "unknown command 'evall' (did you mean 'eval'?)"
"$HYDRA" >"$W/o" 2>&1; rc=$?
check "no command is refused" test "$rc" -ne 0
check "no command prints the help" contains "$W/o" "score-heads"
"$HYDRA" train --preset tiny-cpu optim.lrr=0.1 >"$W/o" 2>&1; rc=$?
check "a mistyped key is refused" test "$rc" -ne 0
check "the refusal suggests the key" contains "$W/o" "did you mean 'optim.lr'?"

# --steps 0: one short line, no 300-digit bound.
"$HYDRA" train --steps 0 >"$W/o" 2>&1; rc=$?
check "--steps 0 is refused" test "$rc" -ne 0
check "--steps 0 message is readable" contains "$W/o" "must be at least 1, got 0"
check "--steps 0 message is short" test "$(wc -c <"$W/o")" -lt 200

if [ -f "$PROSE" ]; then
  TRAIN=(train --preset test-micro run.threads=1 run.steps=2 run.save_every=2 "data.shard_dir=$W/shards")
  mkdir -p "$W/mine/sub" && echo keep >"$W/mine/important.txt" && echo notes >"$W/mine/sub/notes.md"
  "$HYDRA" "${TRAIN[@]}" --out "$W/mine/" >"$W/o" 2>&1; rc=$?
  check "train --out of other files is refused" test "$rc" -ne 0
  check "the refusal names --force" contains "$W/o" "--force"
  check "the other files are kept" test "$(cat "$W/mine/important.txt")" = keep -a -f "$W/mine/sub/notes.md"
  "$HYDRA" "${TRAIN[@]}" --out "$W/mine/" --force >"$W/o" 2>&1; rc=$?
  check "--force replaces it" test "$rc" -eq 0 -a -f "$W/mine/state.json" -a ! -e "$W/mine/important.txt"
  (cd "$W" && "$HYDRA" train --resume mine/ --steps 4 >"$W/o" 2>&1); rc=$?
  check "relative --resume with a trailing slash" test "$rc" -eq 0
  check "no leftovers next to the run" test "$(ls "$W" | grep -c '^mine\.')" -eq 0
else
  echo "skip train checks: prose cache missing (tools/setup.sh)"
fi

if [ -f "$MODEL" ] && [ -f "$PROSE" ]; then
  "$HYDRA" ppl "$MODEL" --text "$PROSE" --ctx 65536 >"$W/o" 2>&1; rc=$?
  check "ppl --ctx above the model's context is refused" test "$rc" -ne 0
  check "the refusal names the context" contains "$W/o" "above the model's context of 8192"
else
  echo "skip ppl check: default model missing (tools/setup.sh)"
fi
exit $((fails > 0))
