#!/usr/bin/env bash
# call AP: main with the eighth pass merged and its automatic rules (whole-head scan blocks at B8 d 128, the
# split forward at B1 / B2) and the gated split forward (prep of range k + 2 after scan k): full parity, the
# split forward forced (2 and 4 parts) in parity, the bench, the gate off at B1 / B2 for comparison, fla same call.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ap] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity_all.txt; grep FAIL $OUT/parity_all.txt | head -5
for parts in 2 4; do
  HYDRA_GDN_PARTS=$parts timeout 60 build-device/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "forward in $parts parts: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done
HYDRA_GDN_PARTS=4 HYDRA_GDN_PARTS_GATE=0 timeout 60 build-device/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "4 parts ungated: $(grep -E 'passed' $OUT/p.txt)"; rm -f $OUT/p.txt
st parity
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
for gate in 0 1; do
  HYDRA_GDN_PARTS_GATE=$gate timeout 60 build-device/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 \
    --shape 2x16384x16x128 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150 | sed "s/^/gate $gate: /"
done
for parts in 2 4 8; do
  HYDRA_GDN_PARTS=$parts timeout 60 build-device/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 \
    --shape 2x16384x16x128 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"' | cut -c1-150 | sed "s/^/gated, parts $parts: /"
done
st bench
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -22
st done
