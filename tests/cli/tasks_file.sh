#!/usr/bin/env bash
# CLI checks of `hydra eval --tasks-file` and `hydra report merge` (run by CTest with the built hydra):
# a tiny byte-level model (two steps of the test-micro preset) scores a tiny JSONL and writes the
# results JSON with intervals and the CSV; bad rows are refused naming FILE:LINE before any decoding;
# --tasks-file excludes --tasks; merge refuses a folder without records. Seconds on one thread.
#   tests/cli/tasks_file.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROSE="$ROOT/.cache/prose/austen_persuasion.txt"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"

cat >"$W/rows.jsonl" <<'ROWS'
{"prompt": "The capital of France is", "answer": "Paris", "length": 64, "id": "fr"}
{"prompt": "Colours: red, green,", "answer": ["blue", "yellow"], "length": 64}

{"prompt": "1 2 3 4", "answer": "5", "length": 128, "id": 3}
ROWS
printf '{"prompt": "ok", "answer": "a"}\n{"prompt": "no answer"}\n' >"$W/missing.jsonl"
printf '{"prompt": "ok", "answer": "a"}\n{"prompt": "caf\xe9", "answer": "a"}\n' >"$W/utf8.jsonl"

"$HYDRA" report merge "$W" --out "$W/merged" >"$W/o" 2>&1; rc=$?
check "merge without records is refused" test "$rc" -ne 0
check "the refusal says so" contains "$W/o" "holds no records"

if [ -f "$PROSE" ]; then
  "$HYDRA" train --preset test-micro run.threads=1 run.steps=2 run.save_every=2 data.seq_len=160 "data.shard_dir=$W/shards" \
    --out "$W/m" >"$W/o" 2>&1
  check "tiny model trained" test -f "$W/m/config.json"
  "$HYDRA" eval "$W/m" --tasks-file "$W/rows.jsonl" --out "$W/r/results.json" --threads 1 >"$W/o" 2>&1; rc=$?
  check "missing --out directory is refused" test "$rc" -ne 0
  mkdir -p "$W/r"
  "$HYDRA" eval "$W/m" --tasks-file "$W/rows.jsonl" --out "$W/r/results.json" --threads 1 --bootstrap 200 \
    >"$W/o" 2>&1; rc=$?
  check "eval --tasks-file runs" test "$rc" -eq 0
  check "results.json has the overall interval" contains "$W/r/results.json" '"overall_ci"'
  check "results.json names the file" contains "$W/r/results.json" '"tasks_file"'
  check "results.json keeps row ids" contains "$W/r/results.json" '"id": "fr"'
  check "results.json has integer ids as text" contains "$W/r/results.json" '"id": "3"'
  check "results.json groups by length" contains "$W/r/results.json" '"128"'
  check "results.csv has interval columns" contains "$W/r/results.csv" "score,ci_lo,ci_hi"
  "$HYDRA" eval "$W/m" --tasks-file "$W/missing.jsonl" --out "$W/r/x.json" >"$W/o" 2>&1; rc=$?
  check "a row without answer is refused" test "$rc" -ne 0
  check "the refusal names the line" contains "$W/o" "missing.jsonl:2: missing \"answer\""
  "$HYDRA" eval "$W/m" --tasks-file "$W/utf8.jsonl" --out "$W/r/x.json" >"$W/o" 2>&1; rc=$?
  check "invalid UTF-8 is refused with its line" contains "$W/o" "utf8.jsonl:2: invalid UTF-8"
  python3 -c "import json; print(json.dumps({'prompt': 'word ' * 3000, 'answer': 'x'}))" >"$W/long.jsonl"
  "$HYDRA" eval "$W/m" --tasks-file "$W/long.jsonl" --out "$W/r/x.json" >"$W/o" 2>&1; rc=$?
  check "a prompt beyond the context is refused" test "$rc" -ne 0
  check "the refusal names line and context" contains "$W/o" "long.jsonl:1: the prompt has"
  check "nothing written for refused runs" test ! -e "$W/r/x.json"
  "$HYDRA" eval "$W/m" --tasks-file "$W/rows.jsonl" --tasks vt --out "$W/r/x.json" >"$W/o" 2>&1; rc=$?
  check "--tasks-file excludes --tasks" test "$rc" -ne 0
else
  echo "skip eval checks: prose cache missing (tools/setup.sh)"
fi
exit $((fails > 0))
