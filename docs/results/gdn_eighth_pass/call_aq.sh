#!/usr/bin/env bash
# call AQ: the scan variants forced at B2 / B1 d 128 and at d 64 (whole 64-row heads a block, as variant 8 at
# d 128), with main's binary of call AP (76a8059); ours only, the fla figures are call AP's.
# Carry: .devdeps/scripts build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
B=build-device/cuda_gdn_attention_bench
run() { timeout 60 $B --gdn-only "$@" 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150; }
for v in auto 3 6 7; do
  echo "== d64 B8 H9 scan $v"; HYDRA_GDN_SCAN=$([ $v = auto ] && echo "" || echo $v) run --shape 8x4096x9x64 --shape 4x4096x9x64 --shape 16x4096x9x64
done
for v in auto 3 6 7; do
  echo "== B2 d128 scan $v"; HYDRA_GDN_SCAN=$([ $v = auto ] && echo "" || echo $v) run --shape 2x16384x16x128
done
echo "== B2 d128 one part"; HYDRA_GDN_PARTS=1 run --shape 2x16384x16x128
for v in auto 0 5 6; do
  echo "== B1 d128 scan $v"; HYDRA_GDN_SCAN=$([ $v = auto ] && echo "" || echo $v) run --shape 1x65536x16x128
done
echo "== B1 d128 one part"; HYDRA_GDN_PARTS=1 run --shape 1x65536x16x128
echo "== B4 d128 (64 pairs)"; for v in auto 7 8; do HYDRA_GDN_SCAN=$([ $v = auto ] && echo "" || echo $v) run --shape 4x8192x16x128 | sed "s/^/scan $v: /"; done
