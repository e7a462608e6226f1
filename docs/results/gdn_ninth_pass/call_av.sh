#!/usr/bin/env bash
# call AV (quick, no fla): main (build-device/: the prep's T on tensor cores, the d 64 split rule, our forward
# from a CUDA graph) against branch exp/gdn-tenth (build-device-exp/: the prep's W / U fragments formed from
# fp32 T in registers). Parity, both benches, the split forward forced to 1 / 2 / 4 parts at three d 64 shapes.
# Carry: .devdeps/scripts build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_av] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
HYDRA_GDN_PARTS=2 timeout 60 build-device-exp/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "exp 2 parts: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
st parity
for rep in 1 2; do
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)_$rep
  timeout 150 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep -E "profile|T4096|T16384|T65536" $OUT/$n.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-150
done; done
st bench
for sh in 8x4096x9x64 4x4096x9x64 8x8192x9x64; do
  for p in 1 2 4; do
    HYDRA_GDN_PARTS=$p timeout 60 build-device/cuda_gdn_attention_bench --gdn-only --shape $sh 2>/dev/null | grep -E '"gdn_fwd"|"gdn_fwd_graph"' | cut -c1-100 | sed "s/^/$sh parts $p /; s/\"impl\": \"ours\", //"
  done
done
st sweep
