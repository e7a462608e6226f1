#!/usr/bin/env bash
# call BB: main e2453d4 (build-device/) against the working tree (build-device-exp/): the saving forward scan
# stores each chunk's entering state from the Q-row warps (before the mid barrier, where they wait for the W-row
# warps' delta epilogue) and delta in 16-byte pieces from shared memory by the W-row warps after the barrier,
# instead of all threads at the loop's top and 4-byte stores in the epilogue. Parity of the branch (gdn; scans
# 8, 5, 4, 2 forced), both benches, then the branch's streamed scan sweeps at B2 d 128 and B8 d 64 and its prep
# with 2 blocks a SM there. No fla.
# Carry: .devdeps/scripts build-device/cuda_gdn_attention_bench build-device-exp/cuda_op_parity
#        build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bb] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device-exp/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -5
for sv in 8 5 4 2; do
  timeout 40 build-device-exp/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 100 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep profile $OUT/$n.err | head -12
done
st benches
for sh in 2x16384x16x128 8x4096x9x64; do
  timeout 100 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape $sh --scan-sweep > /tmp/s.jsonl 2> /tmp/s.err
  grep -E "^B|profile\] forward:" /tmp/s.err | paste - - | sed 's/\[gdn profile\]//' ; grep -E "automatic scan" /tmp/s.err | tail -1
  HYDRA_GDN_PREP_BLOCKS=2 timeout 60 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape $sh > /tmp/s.jsonl 2> /tmp/s.err
  echo "prep 2 blocks/SM $sh:"; grep -E '"gdn_fwd"|"gdn_fwd_graph"' /tmp/s.jsonl | cut -c1-100
done
st done
