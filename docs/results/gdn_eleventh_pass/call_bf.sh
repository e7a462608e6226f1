#!/usr/bin/env bash
# call BF (next session's first): branch exp/gdn-twelfth (worktree /work/wt-tenth, binaries build-device-exp/,
# built with BUILD_DIR=/work/main/build-device-exp tools/device_build.sh there): T saved for the backward on and
# below its diagonal only (half of Tm's bytes written by the saving prep and read by the per-chunk backward);
# the scan rule's variant 3 (64 rows x 8 warps) instead of 7 at 33-66 pairs of d 128 (B4: call AY's sweep).
# build-device/: rebuild from main (4b424da or later: BUILD_DIR=build-device tools/device_build.sh) before the call.
# 1. parity of the branch (full; scans 8, 5, 3 forced); 2. main and branch benches (+ B4 T8192); 3. B1 T32768 d 64 (call BE:
# forward+backward 2.188 ms not streamed, 2.396 streamed, unexplained) twice each way with every profile line;
# 4. fla against the branch's rows (compare main's rows by hand if the branch loses).
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bf] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
for sv in 8 5 3; do
  timeout 30 build-device-exp/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "exp scan $sv rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 80 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep profile $OUT/$n.err | sed 's/\[gdn profile\]//' | paste - - - | cut -c1-160
  timeout 40 $b/cuda_gdn_attention_bench --gdn-only --shape 4x8192x16x128 > /tmp/b4.jsonl 2> /tmp/b4.err
  echo "$n B4 T8192: $(grep -oE '"op": "gdn_(fwd|fwdbwd|fwd_graph)"[^}]*"ms": [0-9.]+' /tmp/b4.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ')"
done
st bench
for r in 1 2; do
  for m in 1 0; do
    HYDRA_GDN_STREAM=$m timeout 40 build-device/cuda_gdn_attention_bench --gdn-only --shape 1x32768x9x64 > /tmp/s.jsonl 2> /tmp/s.err
    echo "B1 T32768 d64 stream=$m run $r: $(grep -oE '"op": "gdn_(fwd|fwdbwd|fwd_graph)"[^}]*"ms": [0-9.]+' /tmp/s.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ')"
    grep profile /tmp/s.err | sed 's/\[gdn profile\]//' | paste - - - | cut -c1-200
  done
done
st probe
FLA_PATH=.peer timeout 360 python3 bench/cuda_peers.py --ours $OUT/exp.jsonl --gdn-only --json $OUT/peers.json > /tmp/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" /tmp/peers.txt | tail -24
st done
