#!/usr/bin/env bash
# call BP: the final kernels (tile copies in clusters for the plain forward's 16- and 32-row scans only):
# parity of gdn (automatic; scans 4 and 5 forced, the tile-copy variants), the whole parity program, our
# GDN bench, then fla in the same call (bench/cuda_peers.py --gdn-only).
# Build here: BUILD_DIR=build-device-tma2 tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (tma2/: build-device-tma2's cuda_op_parity and
# cuda_gdn_attention_bench) .peer
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bp] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/tma2
for sc in 4 5; do
  timeout 100 $B/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
done
timeout 200 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
st parity
timeout 200 $B/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd_graph"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-120
st bench
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|ratio" $OUT/peers.txt | tail -n 16
st done
