#!/usr/bin/env bash
# Single-stream and concurrent serving, ours against llama.cpp, on one machine in one run: `hydra serve` and
# `llama-server` on the same GGUF, one after the other, each loaded by serve_load at the same prompt lengths
# and stream counts; and the decode step alone, gpu_decode_bench (CUDA graphs) alternated with llama-bench.
# Prints a ratio table (ours / llama.cpp: above 1 means ours is faster) and leaves each level's JSON in $OUT.
#
# llama.cpp is not built here: point LLAMA_BIN at a folder holding llama-server and llama-bench (and their
# shared libraries) built outside the repository.
#
#   LLAMA_BIN=DIR [HYDRA_BIN=build] [DEVICE=cuda] [LENGTHS=512,4096] [STREAMS=1] [MAX_TOKENS=128] \
#     [CTX=8192] [CTX_KEY=llama] [OUT=serve_vs_llamacpp] bench/serve_vs_llamacpp.sh MODEL.gguf
#
# Each server gets one slot per stream (llama-server: -np S -c S*CTX) and whole prompts per step; every level
# runs twice and the second (warm: a new prompt length plans its attention once; serve_load draws new prompts for
# it, so no server answers it from its slot's cached KV) is the one compared.
# Exit status: 2 on bad arguments, 3 when a server does not come up, else 0.
set -uo pipefail
MODEL="${1:-}"
[[ -f "$MODEL" ]] || { echo "usage: LLAMA_BIN=DIR $0 MODEL.gguf  (MODEL not found: '$MODEL')" >&2; exit 2; }
LLAMA_BIN="${LLAMA_BIN:-}"
for t in llama-server llama-bench; do
  [[ -x "$LLAMA_BIN/$t" ]] || { echo "[serve_vs_llamacpp] LLAMA_BIN=$LLAMA_BIN has no executable $t" >&2; exit 2; }
done
HYDRA_BIN="${HYDRA_BIN:-build}"
for t in hydra serve_load; do
  [[ -x "$HYDRA_BIN/$t" ]] || { echo "[serve_vs_llamacpp] HYDRA_BIN=$HYDRA_BIN has no executable $t" >&2; exit 2; }
done
DEVICE="${DEVICE:-cuda}" LENGTHS="${LENGTHS:-512,4096}" STREAMS="${STREAMS:-1}" MAX_TOKENS="${MAX_TOKENS:-128}"
CTX="${CTX:-8192}" OUT="${OUT:-serve_vs_llamacpp}"
for v in MAX_TOKENS CTX; do [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer" >&2; exit 2; }; done
[[ "${CTX_KEY:-llama}" =~ ^[A-Za-z0-9_]+$ ]] || { echo "CTX_KEY: a GGUF architecture name (letters, digits, _)" >&2; exit 2; }
for v in LENGTHS STREAMS; do [[ "${!v}" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "$v: comma-separated positive integers" >&2; exit 2; }; done
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
max_streams=$(tr ',' '\n' <<< "$STREAMS" | sort -n | tail -1)
port_ours=18080 port_llama=18081

wait_up() {  # wait_up URL PID: 0 once /health answers 200, 1 if the process died or 120 s passed
  for _ in $(seq 1 240); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf "$1/health" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

load() {  # load NAME URL: every length, every stream count twice (cold, warm) into $OUT/NAME_L_S.json
  local name=$1 url=$2 L S
  for L in ${LENGTHS//,/ }; do
    for S in ${STREAMS//,/ }; do
      "$HYDRA_BIN/serve_load" --url "$url" --concurrency "$S,$S" --prompt-tokens "$L" --max-tokens "$MAX_TOKENS" \
        --token-range 100:40000 --out "$OUT/${name}_${L}_${S}.json" 2> "$OUT/${name}_${L}_${S}.log"
    done
  done
}

serve() {  # serve NAME PORT COMMAND...: start, load, SIGTERM; the server's exit status is logged
  local name=$1 port=$2
  shift 2
  "$@" > "$OUT/${name}_server.log" 2>&1 &
  local pid=$!
  if ! wait_up "http://127.0.0.1:$port" "$pid"; then
    echo "[serve_vs_llamacpp] $name did not come up (log: $OUT/${name}_server.log)" >&2
    kill "$pid" 2> /dev/null
    exit 3
  fi
  load "$name" "http://127.0.0.1:$port"
  kill -TERM "$pid"
  wait "$pid"
  echo "[serve_vs_llamacpp] $name exited with $? on SIGTERM"
}

serve hydra "$port_ours" "$HYDRA_BIN/hydra" serve "$MODEL" --device "$DEVICE" --port "$port_ours" \
  --max-seqs "$max_streams" --ctx "$CTX" --prefix-cache-mb 0
ngl=99
[[ "$DEVICE" == cpu ]] && ngl=0
# llama-server caps each slot at the GGUF's training context (8K for SmolLM2) unless it is overridden; ours does not
# cap, so both run unscaled RoPE past it (CTX_KEY: the GGUF's architecture, llama by default)
serve llama "$port_llama" "$LLAMA_BIN/llama-server" -m "$MODEL" -ngl "$ngl" -fa on -np "$max_streams" \
  -c $((max_streams * CTX)) --override-kv "${CTX_KEY:-llama}.context_length=int:$CTX" -b 2048 -ub 2048 --port "$port_llama"

# the decode step alone at each prompt length, alternated: ours after L positions, llama-bench's tg128 at depth L
if [[ "$DEVICE" == cuda && -x "$HYDRA_BIN/gpu_decode_bench" ]]; then
  for round in 1 2; do
    "$HYDRA_BIN/gpu_decode_bench" --lengths "$LENGTHS" --steps 200 "$MODEL" > "$OUT/decode_ours_$round.txt" 2>&1
    "$LLAMA_BIN/llama-bench" -m "$MODEL" -ngl "$ngl" -fa 1 -p 0 -n 128 -d "$LENGTHS" -r 5 \
      > "$OUT/decode_llama_$round.txt" 2>&1
  done
fi

python3 - "$OUT" "$LENGTHS" "$STREAMS" << 'EOF'
import json, os, re, sys
out, lengths, streams = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
def warm(name, L, S):
    try:
        levels = json.load(open(os.path.join(out, f"{name}_{L}_{S}.json")))["levels"]
        return levels[-1]
    except (OSError, ValueError, KeyError, IndexError):
        return None
print("| prompt | streams | hydra tok/s | llama-server tok/s | hydra / llama | hydra TTFT p50 ms | llama TTFT p50 ms |")
print("|---|---|---|---|---|---|---|")
for L in lengths:
    for S in streams:
        h, l = warm("hydra", L, S), warm("llama", L, S)
        if not h or not l:
            print(f"| {L} | {S} | {'-' if not h else round(h['output_tokens_per_s'], 1)} | "
                  f"{'-' if not l else round(l['output_tokens_per_s'], 1)} | (a level is missing) | | |")
            continue
        ht, lt = h["output_tokens_per_s"], l["output_tokens_per_s"]
        print(f"| {L} | {S} | {ht:.1f} | {lt:.1f} | {ht / lt if lt else float('nan'):.2f} | "
              f"{h['ttft_ms']['p50']:.0f} | {l['ttft_ms']['p50']:.0f} |")
ours, peer = {}, {}  # positions -> ms/token of each round
for r in (1, 2):
    try:
        for line in open(os.path.join(out, f"decode_ours_{r}.txt")):
            m = re.match(r"\| [^|]+\.gguf \| ([0-9]+) \| [0-9.]+ \| ([0-9.]+) \|", line)
            if m: ours.setdefault(int(m.group(1)), []).append(float(m.group(2)))
        for line in open(os.path.join(out, f"decode_llama_{r}.txt")):
            m = re.search(r"tg128 @ d([0-9]+) \|\s+([0-9.]+)", line)
            if m: peer.setdefault(int(m.group(1)), []).append(1000.0 / float(m.group(2)))
    except OSError:
        pass
if ours and peer:
    print("| positions | ours ms/token | llama-bench tg128 ms/token | ours / llama (speed, best against best) |")
    print("|---|---|---|---|")
for L in sorted(set(ours) & set(peer)):
    o, p = ours[L], peer[L]
    print(f"| {L} | {' / '.join(f'{x:.3f}' for x in o)} | {' / '.join(f'{x:.3f}' for x in p)} | "
          f"{min(p) / min(o):.2f}x |")
EOF
