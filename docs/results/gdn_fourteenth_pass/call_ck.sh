#!/usr/bin/env bash
# call CK: main's tip after call CJ (the scan's shared-memory carveout asked once per kernel; host code only):
# the whole parity program, gdn with scans 4 and 5 forced, and the forward at B1, B2 and d 64 once.
# Build here: BUILD_DIR=build-device-final2 tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (ck/: cuda_op_parity, cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ck] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/ck
timeout 100 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 60 $B/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
done
st parity
timeout 100 $B/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64 > $OUT/bench.jsonl 2> $OUT/bench.err; echo "bench rc $?"
grep -E '"gdn_fwd_graph"' $OUT/bench.jsonl | cut -c1-120
st done
