#!/usr/bin/env bash
# call CJ: the final kernels of the fourteenth pass (the producer-warp tile-copy scans at 112 registers, two
# barriers a stage; the prep-beside-scan rule counting sub-partition registers): the whole parity program, gdn
# with scans 4 and 5 forced and unstreamed, the training-op parity, then our GDN bench and fla in the same
# call (bench/cuda_peers.py --gdn-only).
# Build here: BUILD_DIR=build-device-final tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (cj/: cuda_op_parity, cuda_gdn_attention_bench,
# cuda_train_ops_parity) .peer
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cj] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/cj
timeout 100 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 60 $B/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
done
HYDRA_GDN_STREAM=0 timeout 60 $B/cuda_op_parity --only gdn > $OUT/parity_nostream.txt 2>&1; echo "parity gdn unstreamed rc $?: $(tail -n 1 $OUT/parity_nostream.txt)"
timeout 60 $B/cuda_train_ops_parity > $OUT/train_ops_parity.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/train_ops_parity.txt)"
st parity
timeout 150 $B/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd_graph"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-120
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|ratio" $OUT/peers.txt | tail -n 16
st done
