#!/usr/bin/env bash
# call BK (prepared for the next session, not run): where the streamed forward's time goes at B2 T16384 d 128 and
# B8 H9 d 64 (prep-bound there, eleventh pass) and at B1 T65536 (scan-bound). Nsight Compute cannot replay two
# kernels that run at the same time, so each kernel is profiled alone (HYDRA_GDN_STREAM=0) for its stall profile,
# and nsys-free timing of the streamed forward comes from the bench's profile lines.
# Build first, here: BUILD_DIR=build-device NVEXTRA=-lineinfo tools/device_build.sh
# Carry: .devdeps/scripts (copy this file there) build-device/cuda_gdn_attention_bench
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bk] $(( $(date +%s) - t0 )) s: $*"; }
B=build-device
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for shape in 2x16384x16x128 8x4096x9x64 1x65536x16x128; do
  timeout 40 $B/cuda_gdn_attention_bench --gdn-only --shape $shape 2>&1 | grep -E 'gdn_fwd_graph|profile' | head -3
  for k in gdn_fwd_prep gdn_fwd_scan; do
    HYDRA_GDN_STREAM=0 timeout 120 $NCU --clock-control none -k regex:"$k" -c 1 --section WarpStateStats \
      --section SourceCounters --section SpeedOfLight --import-source yes --source-folders $PWD/src/ops/cuda \
      -o /tmp/$k-$shape $B/cuda_gdn_attention_bench --gdn-only --shape $shape > /tmp/ncu.log 2>&1
    echo "ncu $k $shape rc $?"
    $NCU --import /tmp/$k-$shape.ncu-rep --page source --csv --print-source sass > $OUT/${k}_$shape.csv 2>/dev/null
    gzip -9 $OUT/${k}_$shape.csv
    $NCU --import /tmp/$k-$shape.ncu-rep --page details 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Registers" | head -4
  done
  st $shape
done
