#!/usr/bin/env bash
# call AI: bchunk tf32 products + epilogue row factors, scan delta pair stores, prep rework: full parity,
# ours, fla in the same call
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ai] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"
head -3 $OUT/parity_all.txt; grep -E "passed" $OUT/parity_all.txt; grep -E "FAIL" $OUT/parity_all.txt | head
timeout 60 build-device/cuda_op_parity --only gdn --scan 4 > $OUT/p4.txt 2>&1; echo "scan 4: $(grep -E 'passed' $OUT/p4.txt)"
st parity
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
st bench
FLA_PATH=.peer timeout 420 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/summary.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
tail -16 $OUT/peers.txt
st done
