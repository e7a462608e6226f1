#!/usr/bin/env bash
# call AR: main with call AQ's scan rule (64-row slices at d 128 for 33-66 pairs, whole d 64 heads for 67-132
# pairs on 132 SMs) and without the prep gate: full parity, scans 3 / 7 / 8 forced, the bench at the ANCHORS
# shapes and at B4 d 128 / B8 d 64 (the new automatic choices); fla's figures are call AP's.
# Carry: .devdeps/scripts build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity_all.txt; grep FAIL $OUT/parity_all.txt | head -5
for sv in 3 7 8; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done
HYDRA_GDN_PARTS=4 timeout 60 build-device/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "4 parts: $(grep -E 'passed' $OUT/p.txt)"; rm -f $OUT/p.txt
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
timeout 60 build-device/cuda_gdn_attention_bench --gdn-only --shape 4x8192x16x128 --shape 8x4096x9x64 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150
