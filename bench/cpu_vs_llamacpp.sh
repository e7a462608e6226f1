#!/usr/bin/env bash
# CPU inference benchmark: HydraHead vs llama.cpp on the same GGUF, same machine, same run.
#   LLAMA_BENCH=/path/to/llama-bench [LOAD=N] bench/cpu_vs_llamacpp.sh [MODEL] [PP] [TG]
# llama.cpp is built outside this repository (nothing of it is committed); point LLAMA_BENCH at its
# llama-bench binary. Prints a markdown table with the ratio hydra / llama.cpp. LOAD=N runs both under N
# busy-looping shell processes (a reproducible stand-in for a machine shared with other work), stopped at
# the end.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:-$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
PP="${2:-512}"
TG="${3:-128}"
THREADS="$(nproc)"
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary built outside the repo}"
HYDRA_BENCH="$ROOT/build/bench_cpu_inference"
[ -x "$HYDRA_BENCH" ] || { echo "build first: cmake --build build --target bench_cpu_inference" >&2; exit 1; }

LOAD="${LOAD:-0}"
[[ "$LOAD" =~ ^[0-9]+$ ]] || { echo "LOAD='$LOAD': expected a whole number of busy loops" >&2; exit 1; }
busy=()
trap 'for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done' EXIT
for ((i = 0; i < LOAD; ++i)); do
  (while :; do :; done) &
  busy+=("$!")
done
ours="$("$HYDRA_BENCH" "$MODEL" --pp "$PP" --tg "$TG" --reps 3 --threads "$THREADS")"
theirs="$("$LLAMA_BENCH" -m "$MODEL" -p "$PP" -n "$TG" -t "$THREADS" -r 3 -o json 2>/dev/null)"
echo "load: $LOAD busy loops"
python3 - "$ours" "$theirs" "$PP" "$TG" "$THREADS" <<'PY'
import json, sys
ours = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
theirs = json.loads(sys.argv[2])
pp, tg, threads = sys.argv[3], sys.argv[4], sys.argv[5]
o = {r["test"]: r["tokens_per_s"] for r in ours}
t = {}
for r in theirs:
    key = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    t[key] = r["avg_ts"]
    build = r.get("build_commit", "?")
print(f"| test | hydra tok/s | llama.cpp tok/s ({build}) | ratio hydra/llama.cpp |")
print("|---|---|---|---|")
for key in (f"pp{pp}", f"tg{tg}"):
    print(f"| {key} ({threads} threads) | {o[key]:.1f} | {t[key]:.1f} | {o[key] / t[key]:.2f} |")
PY
