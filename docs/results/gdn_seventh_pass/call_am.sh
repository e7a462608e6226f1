#!/usr/bin/env bash
# call AM: the per-chunk backward's triangular tf32 products (10 of 16 tiles, split k-ranges, no warp over 2 of
# 4 k-blocks) and d delta in bf16 from the reverse scan: full parity, the 8-warp per-chunk backward's parity,
# bench, fla in the same call (its chunk forward also from a CUDA graph).
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_am] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity_all.txt; grep FAIL $OUT/parity_all.txt | head -5
HYDRA_GDN_BCHUNK_WARPS=8 timeout 60 build-device/cuda_op_parity --only gdn > $OUT/parity_bchunk8.txt 2>&1; echo "bchunk 8 warps: $(grep -E 'passed' $OUT/parity_bchunk8.txt)"; grep FAIL $OUT/parity_bchunk8.txt | head -3
st parity
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
st bench
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/summary.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -22
st done
