#!/usr/bin/env bash
# call AG: three-stage scans (variants 8, 9) and the prep's split copy groups: parity, sweep
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ag] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device/cuda_op_parity --only gdn > $OUT/parity.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity.txt; grep FAIL $OUT/parity.txt | head -5
for sv in 8 9; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p$sv.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p$sv.txt)"; grep FAIL $OUT/p$sv.txt | head -3
done
st parity
timeout 300 build-device/cuda_gdn_attention_bench --gdn-only --scan-sweep > $OUT/sweep.jsonl 2> $OUT/sweep.err; echo "sweep rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/sweep.jsonl | grep -v '"scan"' | cut -c1-110
grep -E "scan|T65536|T16384|T4096" $OUT/sweep.err | grep -v automatic | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-170
grep automatic $OUT/sweep.err
st done
