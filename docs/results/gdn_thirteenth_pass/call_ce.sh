#!/usr/bin/env bash
# call CE: after call CD (and qrow0 scoped to the cp.async layout), the prep's live-tile bound made exact for warps whose tile lies wholly above the diagonal
# (it counted one dead n-tile there; its results were masked to zero). Parity: the whole program, gdn with the
# 4-warp prep; the forward at B2, B1 and d 64 once.
# Build here: BUILD_DIR=build-device-ce tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (ce/: cuda_op_parity, cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ce] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/ce
timeout 200 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i fail $OUT/parity.txt | head -5
HYDRA_GDN_PREP_WARPS=4 timeout 100 $B/cuda_op_parity --only gdn > $OUT/parity_prep4.txt 2>&1; echo "parity gdn prep 4 rc $?: $(tail -n 1 $OUT/parity_prep4.txt)"
st parity
timeout 120 $B/cuda_gdn_attention_bench --gdn-only --shape 2x16384x16x128 --shape 1x65536x16x128 --shape 8x4096x9x64 > $OUT/bench.jsonl 2> $OUT/bench.err; echo "bench rc $?"
grep -E '"gdn_fwd_graph"' $OUT/bench.jsonl | cut -c1-120
st done
