#!/usr/bin/env bash
# call AN: the per-chunk backward skipping the zero k-steps of its triangular bf16 products and the products of
# tiles wholly above the diagonal: full parity, the 8-warp variant, bench, fla in the same call.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_an] $(( $(date +%s) - t0 )) s: $*"; }
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
