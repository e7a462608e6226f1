#!/usr/bin/env bash
# call AH: scans staged with bulk copies (HYDRA_GDN_SCAN_BULK=1, default) against cp.async (=0)
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ah] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device/cuda_op_parity --only gdn > $OUT/parity.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity.txt; grep FAIL $OUT/parity.txt | head -5
for sv in 0 2 4 5; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -3
done; rm -f $OUT/p.txt
st parity
for b in 0 1; do
  HYDRA_GDN_SCAN_BULK=$b timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours$b.jsonl 2> $OUT/ours$b.err; echo "bulk=$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours$b.jsonl | cut -c1-110; grep -E "profile|T4096|T16384|T65536" $OUT/ours$b.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done
st bench
HYDRA_GDN_SCAN_BULK=1 timeout 200 build-device/cuda_gdn_attention_bench --gdn-only --scan-sweep > $OUT/sweep.jsonl 2> $OUT/sweep.err; echo "sweep rc $?"
grep -E "scan [0-9]|T65536|T16384|T4096" $OUT/sweep.err | grep -v automatic | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-170
grep automatic $OUT/sweep.err
st done
