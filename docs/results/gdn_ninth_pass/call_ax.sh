#!/usr/bin/env bash
# call AX: branch exp/gdn-tenth (build-device-exp/: the whole-head forward scan with every warp owning a state
# part, no spill) against main 0ea2bab (build-device/), then fla in the same call against the branch's rows.
# Carry: .devdeps/scripts .peer build-device/cuda_gdn_attention_bench build-device-exp/cuda_op_parity
#        build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ax] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
for sv in 8 7; do
  timeout 40 build-device-exp/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 100 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep -E "profile|T4096|T16384|T65536" $OUT/$n.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-150
done
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/exp.jsonl --gdn-only --json $OUT/peers.json > /tmp/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" /tmp/peers.txt | tail -22
st done
