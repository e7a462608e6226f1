#!/usr/bin/env bash
# call AB: review commits + scan variants 4-7 (more warps per block): parity on each, ours timed per forced variant
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ab] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device/cuda_op_parity --only gdn > $OUT/parity_gdn.txt 2>&1; echo "rc $?"
head -1 $OUT/parity_gdn.txt; grep -E "passed" $OUT/parity_gdn.txt; grep -E "FAIL" $OUT/parity_gdn.txt | head
for sv in 4 5 6 7; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv rc $?: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -3
  cat $OUT/p.txt >> $OUT/parity_scans.txt
done
rm -f $OUT/p.txt
st "parity done"
for sv in auto 0 1 2 3 4 5 6 7; do
  if [ $sv = auto ]; then e=""; else e="HYDRA_GDN_SCAN=$sv"; fi
  echo "== scan $sv" >> $OUT/variants.txt
  env $e timeout 90 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/o.jsonl 2> $OUT/o.err; echo "scan $sv rc $?"
  grep -E "gdn_fwd|gdn_fwdbwd" $OUT/o.jsonl >> $OUT/variants.txt; grep -E "^B|profile\]" $OUT/o.err >> $OUT/variants.txt
  st "scan $sv"
done
rm -f $OUT/o.jsonl $OUT/o.err
grep -E "^==|profile|^B" $OUT/variants.txt
st done
