#!/usr/bin/env bash
# call BK: where the forward's time goes. Each kernel alone (HYDRA_GDN_PARTS=1: one prep, then one scan), so
# Nsight Compute can replay it: throughput (SpeedOfLight, MemoryWorkloadAnalysis: is the scan at B1 bound by
# L2 -> SM traffic, 8 slice blocks of a head each loading the chunk's W, Q, K, P?), stall reasons, per-line
# stall samples. Then the streamed forward's timing at the same shapes.
# Build here: BUILD_DIR=build-device-new NVEXTRA=-lineinfo tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-device-new
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bk] $(( $(date +%s) - t0 )) s: $*"; }
B=build-device-new
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
mkdir -p /tmp/csv
for job in "scan 1x65536x16x128" "scan 2x16384x16x128" "prep 2x16384x16x128" "prep 8x4096x9x64" "scan 8x4096x9x64"; do
  set -- $job; k=gdn_fwd_$1; shape=$2
  HYDRA_GDN_PARTS=1 timeout 150 $NCU --clock-control none -k regex:"$k" -s 2 -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --section Occupancy \
    --import-source yes --source-folders $PWD/src/ops/cuda \
    -o /tmp/$k-$shape $B/cuda_gdn_attention_bench --gdn-only --shape $shape > /tmp/ncu.log 2>&1
  echo "== $k $shape rc $?" | tee -a $OUT/details.txt
  $NCU --import /tmp/$k-$shape.ncu-rep --page details >> $OUT/details.txt 2>&1
  $NCU --import /tmp/$k-$shape.ncu-rep --page raw --csv 2>/dev/null | gzip -9 > /tmp/csv/raw_${k}_$shape.csv.gz
  $NCU --import /tmp/$k-$shape.ncu-rep --page source --csv --print-source cuda 2>/dev/null | gzip -9 > /tmp/csv/${k}_$shape.cuda.csv.gz
  $NCU --import /tmp/$k-$shape.ncu-rep --page details 2>&1 | grep -E "Duration|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|Registers Per" | head -8
  st "$k $shape"
done
tar -C /tmp/csv -cf $OUT/profiles.tar .
for shape in 2x16384x16x128 1x65536x16x128 8x4096x9x64; do
  timeout 60 $B/cuda_gdn_attention_bench --gdn-only --shape $shape 2> /tmp/e.txt | grep -E 'gdn_fwd_graph'
  grep "forward:" /tmp/e.txt
  HYDRA_GDN_PARTS=1 timeout 60 $B/cuda_gdn_attention_bench --gdn-only --shape $shape 2>&1 >/dev/null | grep "forward:"
done | tee $OUT/timing.txt
st done
