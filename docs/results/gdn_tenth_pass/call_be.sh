#!/usr/bin/env bash
# call BE: main (build-device/ built from 89a761b): the streamed forward against HYDRA_GDN_STREAM=0 at
# shapes off the benchmark list, where the rule also streams (one-wave scans with room), from the same binary.
# Carry: .devdeps/scripts build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
for sh in 1x4096x16x128 2x4096x16x128 1x16384x16x128 4x4096x9x64 8x2048x9x64 1x32768x9x64 16x4096x9x64; do
  for m in 1 0; do
    HYDRA_GDN_STREAM=$m timeout 40 build-device/cuda_gdn_attention_bench --gdn-only --shape $sh > /tmp/s.jsonl 2> /tmp/s.err
    echo "$sh stream=$m rc $?: $(grep -E 'profile\] forward:' /tmp/s.err | head -1 | sed 's/\[gdn profile\]//') | $(grep -oE '"op": "gdn_(fwd|fwdbwd|fwd_graph)"[^}]*"ms": [0-9.]+' /tmp/s.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ')"
  done
done
