#!/usr/bin/env bash
# call BJ (the session's last device time): branch exp/bchunk-persistent (build-device-persist/): the per-chunk backward
# as a persistent kernel that copies the next item's operands under the current one's products, against main 33fa9a8
# (build-device-new/). Parity (full, persistent; gdn with HYDRA_GDN_BCHUNK_PERSIST=0), B8 alternating, the branch's
# gdn rows, fla in the same call (against the branch's rows; main's ratios by hand from peers.json).
# Carry: .devdeps/scripts .peer build-device-new/cuda_gdn_attention_bench build-device-persist/cuda_op_parity
#        build-device-persist/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bj] $(( $(date +%s) - t0 )) s: $*"; }
P=build-device-persist
timeout 60 $P/cuda_op_parity > $OUT/parity_persist.txt 2>&1; echo "persist parity rc $?: $(grep -E 'passed' $OUT/parity_persist.txt)"; grep FAIL $OUT/parity_persist.txt | head -5
HYDRA_GDN_BCHUNK_PERSIST=0 timeout 30 $P/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "persist=0 gdn rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -3
grep -E "gdn_chunk bwd" $OUT/parity_persist.txt | head -16
st parity
for r in 1 2; do
  for b in new persist; do
    timeout 30 build-device-$b/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/s.jsonl 2> /tmp/s.err
    echo "$b B8 run $r: $(grep -oE '"op": "gdn_(fwdbwd)"[^}]*"ms": [0-9.]+' /tmp/s.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ') $(grep profile /tmp/s.err | grep backward | sed 's/\[gdn profile\]//')"
  done
done
st b8
timeout 80 $P/cuda_gdn_attention_bench --gdn-only > $OUT/persist.jsonl 2> $OUT/persist.err; echo "persist rc $?"
grep -E '"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/persist.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
grep profile $OUT/persist.err | grep backward | sed 's/\[gdn profile\]//'
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/persist.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -20
st done
