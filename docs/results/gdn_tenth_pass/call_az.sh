#!/usr/bin/env bash
# call AZ: the streamed forward (main working tree, build-device/): the prep and the scan at the same time, the
# scan waiting on per-chunk flags, where a prep block fits beside each scan block (B2, B1 d 128; B8 d 64).
# Parity (full; scans 2 (single-buffered), 4, 5 forced; HYDRA_GDN_STREAM=0), then the bench streamed and with
# HYDRA_GDN_STREAM=0 (the split / serial forward of main a456532) from the same binary. No fla (call AX's).
# Carry: .devdeps/scripts build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_az] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device/cuda_op_parity > /tmp/parity.txt 2>&1; echo "parity rc $?: $(grep -E 'passed' /tmp/parity.txt)"; grep FAIL /tmp/parity.txt | head -5
cp /tmp/parity.txt $OUT/parity.txt
for sv in 2 4 5; do
  timeout 40 build-device/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
HYDRA_GDN_STREAM=0 timeout 40 build-device/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "not streamed rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
st parity
for mode in 1 0; do
  n=$([ $mode = 1 ] && echo stream || echo serial)
  HYDRA_GDN_STREAM=$mode timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep -E "streamed|parts" $OUT/$n.err | sort | uniq -c | head -8
done
st done
