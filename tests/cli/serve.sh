#!/usr/bin/env bash
# CLI check of `hydra serve` (run by CTest with the built hydra and, when built, serve_load): the server
# starts on the default model on a free port and prints its URL, answers a completion and a bad request,
# takes a short load from serve_load, and on SIGTERM finishes and exits 0. Skipped (77) without the model.
#   tests/cli/serve.sh path/to/hydra [path/to/serve_load]
set -uo pipefail
HYDRA="$(realpath "$1")"
LOAD="${2:-}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="${HYDRA_MODEL:-$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ -f "$MODEL" ] || { echo "skip: $MODEL absent (tools/setup.sh fetches it)"; exit 77; }
W="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null; rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"

"$HYDRA" serve "$MODEL" --port 0 --max-seqs 2 --ctx 256 --threads 2 --served-name smol >"$W/out" 2>"$W/err" &
PID=$!
URL=""
for _ in $(seq 1 600); do
  URL="$(grep -o 'http://[0-9.]*:[0-9]*' "$W/out" | head -1)"
  [ -n "$URL" ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
check "prints the URL when listening" test -n "$URL"
[ -n "$URL" ] || { cat "$W/out" "$W/err"; exit 1; }

request() {  # request PATH JSON -> "STATUS BODY"
  python3 - "$URL$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
}
r="$(request /v1/completions '{"model": "smol", "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}')"
check "a completion is answered" grep -q '^200 .*"text_completion"' <<<"$r"
r="$(request /v1/completions '{"prompt": "x", "max_tokens": "four"}')"
check "a bad request is a 400 naming the field" grep -q '^400 .*"param":"max_tokens"' <<<"$r"
if [ -n "$LOAD" ] && [ -x "$LOAD" ]; then
  "$LOAD" --url "$URL" --concurrency 1,3 --prompt-tokens 16 --max-tokens 4 --out "$W/load.json" 2>"$W/load.err"
  check "serve_load runs against hydra serve" python3 -c "
import json, sys
d = json.load(open('$W/load.json'))
assert [l['ok'] for l in d['levels']] == [1, 3], d
assert all(l['output_tokens'] == 4 * l['ok'] and l['ttft_ms']['p50'] > 0 for l in d['levels']), d
"
fi
kill -TERM "$PID"
wait "$PID"; rc=$?
PID=""
check "SIGTERM drains and exits 0" test "$rc" -eq 0
if ((fails)); then cat "$W/out" "$W/err"; echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
