#!/usr/bin/env bash
# call BC: main e2453d4 (build-device/) against the working tree (build-device-exp/): the forward scan in a saving
# and a plain instantiation (SAVE); the saving one stores each chunk's entering state from the Q-row warps and
# delta in 16-byte pieces from shared memory by the W-row warps after the mid barrier. Parity (full; scan 8
# forced three times on both builds: call BB's one dg at 1.055e-2, B1 T37 D128, against 9.5e-3 seen before), both
# benches, the branch with the 2-block prep, then fla against the branch's rows.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bc] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
for b in build-device build-device-exp; do
  for r in 1 2 3; do
    timeout 40 $b/cuda_op_parity --only gdn --scan 8 > /tmp/p.txt 2>&1
    echo "$b scan 8 run $r: $(grep -E 'passed' /tmp/p.txt); $(grep -o 'seed [0-9]*' /tmp/p.txt); worst dg $(grep ' dg ' /tmp/p.txt | awk '{print $(NF-1)}' | sort -g | tail -1)"
    grep FAIL /tmp/p.txt | head -2
  done
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 100 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep profile $OUT/$n.err | sed 's/\[gdn profile\]//' | paste - - - | cut -c1-160
done
HYDRA_GDN_PREP_BLOCKS=2 timeout 100 build-device-exp/cuda_gdn_attention_bench --gdn-only > $OUT/exp_prep2.jsonl 2> /tmp/e2.err; echo "exp prep 2 blocks rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/exp_prep2.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
st bench
FLA_PATH=.peer timeout 360 python3 bench/cuda_peers.py --ours $OUT/exp.jsonl --gdn-only --json $OUT/peers.json > /tmp/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" /tmp/peers.txt | tail -24
st done
