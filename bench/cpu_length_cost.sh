#!/usr/bin/env bash
# Cost at length on the CPU: the teacher against its 7:1 hybrid in hydra, and the teacher in llama.cpp, at
# each context length: one prefill pass over the context, decode tokens/s after it, cache bytes.
#   LLAMA_BENCH=/path/to/llama-bench bench/cpu_length_cost.sh HYBRID_DIR [MODEL] [DEPTHS] [TG]
#   e.g. hydra convert $MODEL --ratio 7:1 --select scores --scores docs/results/smollm2_scores/scores.json --out h71
#        LLAMA_BENCH=... bench/cpu_length_cost.sh h71 "" "0 4096 16384" 32
# llama.cpp is built outside this repository (nothing of it is committed). The hybrid decodes from Q8_0 copies
# of its f32 weights (--q8-weights, what `--quantize-weights q8_0` does in generate / serve); hydra's caches
# are f32, llama.cpp's f16. Random token ids, as llama-bench uses: the cost does not depend on the text (past
# the teacher's window its outputs mean nothing, its costs still count). One repetition per cell: a 16K
# prefill takes minutes on two cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HYBRID="${1:?usage: LLAMA_BENCH=... bench/cpu_length_cost.sh HYBRID_DIR [MODEL] [DEPTHS] [TG]}"
MODEL="${2:-}"
[ -n "$MODEL" ] || MODEL="$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEPTHS="${3:-0 4096 16384}"
TG="${4:-32}"
THREADS="$(nproc)"
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary built outside the repo}"
HYDRA_BENCH="$ROOT/build/bench_cpu_inference"
[ -x "$HYDRA_BENCH" ] || { echo "build first: cmake --build build --target bench_cpu_inference" >&2; exit 1; }
[ -d "$HYBRID" ] || { echo "HYBRID_DIR '$HYBRID': not a directory (a converted model: hydra convert ... --out DIR)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "MODEL '$MODEL': no such file" >&2; exit 1; }
[[ "$TG" =~ ^[1-9][0-9]*$ ]] || { echo "TG='$TG': expected a positive whole number of tokens" >&2; exit 1; }
for d in $DEPTHS; do
  [[ "$d" =~ ^[0-9]+$ ]] || { echo "DEPTHS: '$d' is not a whole number of tokens" >&2; exit 1; }
done

records="$(mktemp)"
trap 'rm -f "$records"' EXIT
for d in $DEPTHS; do
  echo "depth $d ..." >&2
  "$HYDRA_BENCH" "$MODEL" --pp 0 --tg "$TG" --depth "$d" --reps 1 --threads "$THREADS" |
    sed 's/^{/{"model": "teacher", /' >>"$records"
  "$HYDRA_BENCH" "$HYBRID" --q8-weights --pp 0 --tg "$TG" --depth "$d" --reps 1 --threads "$THREADS" |
    sed 's/^{/{"model": "hybrid", /' >>"$records"
  "$LLAMA_BENCH" -m "$MODEL" -p 0 -n "$TG" -d "$d" -t "$THREADS" -r 1 -o jsonl 2>/dev/null |
    sed 's/^{/{"model": "llama.cpp", /' >>"$records"
  if [ "$d" -gt 0 ]; then
    "$LLAMA_BENCH" -m "$MODEL" -p "$d" -n 0 -t "$THREADS" -r 1 -o jsonl 2>/dev/null |
      sed 's/^{/{"model": "llama.cpp", /' >>"$records"
  fi
done
python3 - "$records" "$DEPTHS" "$TG" "$THREADS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
depths, tg, threads = [int(d) for d in sys.argv[2].split()], int(sys.argv[3]), sys.argv[4]
ours = {(r["model"], r["test"], r.get("depth", 0)): r for r in rows if r["model"] != "llama.cpp"}
theirs_tg = {r["n_depth"]: r["avg_ts"] for r in rows if r["model"] == "llama.cpp" and r["n_gen"] > 0}
theirs_pp = {r["n_prompt"]: r["avg_ns"] / 1e9 for r in rows if r["model"] == "llama.cpp" and r["n_prompt"] > 0}
build = next((r.get("build_commit", "?") for r in rows if r["model"] == "llama.cpp"), "?")
kv_t = ours[("teacher", f"tg{tg}", depths[0])]["kv_bytes_per_token"]
print(f"{threads} threads, tg{tg} after each context, llama.cpp {build}; caches: hydra f32, llama.cpp f16\n")
print("| context | prefill s: hydra teacher / hybrid / llama.cpp | decode tok/s: hydra teacher / hybrid / llama.cpp "
      "| hybrid / hydra teacher | hybrid / llama.cpp | cache MiB: hydra teacher / hybrid / llama.cpp |")
print("|---|---|---|---|---|---|")
for d in depths:
    t, h = ours[("teacher", f"tg{tg}", d)], ours[("hybrid", f"tg{tg}", d)]
    pre = lambda m: f'{ours[(m, f"prefill{d}", 0)]["seconds"]:.2f}' if (m, f"prefill{d}", 0) in ours else "-"
    lp = f"{theirs_pp[d]:.2f}" if d in theirs_pp else "-"
    lt = theirs_tg.get(d)
    mib = lambda b: b / 2**20
    print(f"| {d} | {pre('teacher')} / {pre('hybrid')} / {lp} | {t['tokens_per_s']:.1f} / {h['tokens_per_s']:.1f} / "
          f"{lt:.1f} | {h['tokens_per_s'] / t['tokens_per_s']:.2f}x | {h['tokens_per_s'] / lt:.2f}x | "
          f"{mib(t['cache_bytes']):.1f} / {mib(h['cache_bytes']):.1f} / {mib(kv_t / 2 * (d + tg)):.1f} |")
PY
