#!/usr/bin/env bash
# call AJ: the reverse scan's d delta / dO-row writes in pairs and 16-byte pieces: gdn parity, ours
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
timeout 100 build-device/cuda_op_parity --only gdn > $OUT/parity.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity.txt; grep FAIL $OUT/parity.txt | head -5
timeout 60 build-device/cuda_op_parity --only gdn --scan 4 > $OUT/p4.txt 2>&1; echo "scan 4: $(grep -E 'passed' $OUT/p4.txt)"
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
