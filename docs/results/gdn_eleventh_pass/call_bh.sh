#!/usr/bin/env bash
# call BH: per-chunk backward, two candidates against main's kernels before this session's backward work
# (build-device-exp/, = exp/gdn-twelfth): build-device-new/ = main 33fa9a8 (warp-parallel dg sums, no T^T copy,
# dT row-major, G_P bf16 pairs, 16-byte <M0, dM>); build-device-bulk/ = branch exp/bchunk-bulk-loads (that plus
# whole chunks' operands copied by cp.async.bulk on mbarriers, issued by warp 0). Parity of both (gdn; the
# bulk one with scan 8 forced too), B8 alternating x3, every gdn shape of both with profile lines.
# Carry: .devdeps/scripts build-device-{exp,new,bulk}/{cuda_op_parity,cuda_gdn_attention_bench}
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bh] $(( $(date +%s) - t0 )) s: $*"; }
for b in new bulk; do
  timeout 60 build-device-$b/cuda_op_parity --only gdn > $OUT/parity_$b.txt 2>&1; echo "$b gdn parity rc $?: $(grep -E 'passed' $OUT/parity_$b.txt)"; grep FAIL $OUT/parity_$b.txt | head -5
done
timeout 60 build-device-bulk/cuda_op_parity --only gdn --scan 3 > /tmp/p.txt 2>&1; echo "bulk scan 3 rc $?: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -3
grep -E "bwd.*(dg|dk |dq |dv )" $OUT/parity_bulk.txt | head -12
st parity
for r in 1 2 3; do
  for b in exp new bulk; do
    timeout 30 build-device-$b/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/s.jsonl 2> /tmp/s.err
    echo "$b B8 run $r: $(grep -oE '"op": "gdn_(fwdbwd)"[^}]*"ms": [0-9.]+' /tmp/s.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ') $(grep profile /tmp/s.err | grep backward | sed 's/\[gdn profile\]//')"
  done
done
st b8
for b in new bulk; do
  timeout 80 build-device-$b/cuda_gdn_attention_bench --gdn-only > $OUT/$b.jsonl 2> $OUT/$b.err; echo "$b rc $?"
  grep -E '"gdn_fwdbwd"' $OUT/$b.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  grep profile $OUT/$b.err | grep backward | sed 's/\[gdn profile\]//'
done
st done
