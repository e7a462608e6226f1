#!/usr/bin/env bash
# call AY (next session's first): branch exp/gdn-eleventh (worktree /work/wt-tenth, binaries build-device-exp/, built
# with BUILD_DIR=/work/main/build-device-exp tools/device_build.sh there): every 16-warp forward-scan variant spreads
# its state over all 16 warps (main does it for whole d 128 heads only). Parity (full; scans 6, 7 forced), main
# against the branch: the standard bench, B4 T8192 H16 d128 (64 pairs: variant 7 by the rule) and the scan sweep
# at B4, where variants 6 / 7 compete. No fla (main's ratios are call AX's).
# Carry: .devdeps/scripts build-device/cuda_gdn_attention_bench build-device-exp/cuda_op_parity
#        build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ay] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?: $(grep -E 'passed' $OUT/parity_exp.txt)"; grep FAIL $OUT/parity_exp.txt | head -5
for sv in 6 7; do
  timeout 40 build-device-exp/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
for b in build-device build-device-exp; do
  n=$([ $b = build-device ] && echo main || echo exp)
  timeout 100 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$n.jsonl 2> $OUT/$n.err; echo "$n rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/$n.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
  timeout 100 $b/cuda_gdn_attention_bench --gdn-only --shape 4x8192x16x128 --scan-sweep > $OUT/${n}_b4.jsonl 2> $OUT/${n}_b4.err
  grep -E "automatic scan|fastest" $OUT/${n}_b4.err | tail -2
done
st done
