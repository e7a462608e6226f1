#!/usr/bin/env bash
# call BI: main 33fa9a8's kernels (build-device-new/, built with NVEXTRA=-lineinfo): the full parity program, gdn
# with scans 8, 5, 3 forced and streaming off; every gdn shape; flash-linear-attention in the same call.
# Carry: .devdeps/scripts .peer build-device-new/cuda_op_parity build-device-new/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bi] $(( $(date +%s) - t0 )) s: $*"; }
B=build-device-new
timeout 90 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(grep -E 'passed' $OUT/parity.txt)"; grep FAIL $OUT/parity.txt | head -5
for sv in 8 5 3; do
  timeout 30 $B/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
HYDRA_GDN_STREAM=0 timeout 30 $B/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "stream=0 rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
st parity
timeout 90 $B/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_' $OUT/ours.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
grep profile $OUT/ours.err | sed 's/\[gdn profile\]//' | paste - - - | cut -c1-170
st bench
FLA_PATH=.peer timeout 380 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > /tmp/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" /tmp/peers.txt | tail -24
st done
