#!/usr/bin/env bash
# call BD (last of the session): main 89a761b (build-device/: the streamed forward with the 2-block prep, the
# SAVE scans) against the working tree (build-device-exp/): the saving forward scan's states and deltas and the
# reverse scan's dstates copied by the copy engine (cp.async.bulk, bulk_store.cuh), issued by one warp each.
# Parity of both (main full; branch full and scans 8, 5 forced), both benches. No fla (call BC's).
# Carry: .devdeps/scripts build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bd] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device/cuda_op_parity > $OUT/parity_main.txt 2>&1; echo "main parity rc $?: $(grep -E 'passed' $OUT/parity_main.txt)"; grep FAIL $OUT/parity_main.txt | head -5
timeout 60 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
for sv in 8 5; do
  timeout 30 build-device-exp/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "exp scan $sv rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 80 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep profile $OUT/$n.err | sed 's/\[gdn profile\]//' | paste - - - | cut -c1-160
done
st done
