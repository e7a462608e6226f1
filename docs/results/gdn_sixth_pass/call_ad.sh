#!/usr/bin/env bash
# call AD (next session's first): f80f507's load_rows on the GPU (full parity), the scan-variant sweep on that
# build, fla in the same call, and branch exp/bchunk-tf32 (binaries in build-device-tf32/) with and without
# HYDRA_GDN_BCHUNK_TF32=1. Carry: .devdeps/scripts .peer build-device/cuda_op_parity
# build-device/cuda_gdn_attention_bench [build-device-tf32]
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ad] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"
head -3 $OUT/parity_all.txt; grep -E "passed" $OUT/parity_all.txt; grep -E "FAIL" $OUT/parity_all.txt | head
for sv in 5 4; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"
done; rm -f $OUT/p.txt
st "parity"
timeout 240 build-device/cuda_gdn_attention_bench --gdn-only --scan-sweep > $OUT/ours_sweep.jsonl 2> $OUT/ours_sweep.err; echo "sweep rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours_sweep.jsonl | cut -c1-110; grep -E "automatic scan" $OUT/ours_sweep.err
st "sweep"
if [ -x build-device-tf32/cuda_op_parity ]; then
  HYDRA_GDN_BCHUNK_TF32=1 timeout 60 build-device-tf32/cuda_op_parity --only gdn > $OUT/parity_tf32.txt 2>&1; echo "tf32 parity: $(grep -E 'passed' $OUT/parity_tf32.txt)"; grep FAIL $OUT/parity_tf32.txt | head -3
  for e in 0 1; do
    HYDRA_GDN_BCHUNK_TF32=$e timeout 90 build-device-tf32/cuda_gdn_attention_bench --gdn-only > $OUT/o.jsonl 2> $OUT/o.err
    echo "tf32=$e"; grep -E "gdn_fwdbwd" $OUT/o.jsonl | cut -c1-110; grep "backward:" $OUT/o.err
  done; rm -f $OUT/o.jsonl $OUT/o.err
  st "tf32"
fi
build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err
FLA_PATH=.peer timeout 420 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/summary.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
tail -25 $OUT/peers.txt
st done
