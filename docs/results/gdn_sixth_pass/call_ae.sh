#!/usr/bin/env bash
# call AE: is the scan bound by its shared operand loads? (what-if build: W/Q/K/P loaded only for the first
# ST chunks; timings only, results wrong); ncu SOL + memory of the B1 scan; ncu source sampling of the prep
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ae] $(( $(date +%s) - t0 )) s: $*"; }
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
timeout 200 build-whatif/cuda_gdn_attention_bench --gdn-only --scan-sweep $SH > $OUT/whatif.jsonl 2> $OUT/whatif.err; echo "whatif rc $?"
grep -E "scan|T65536|T16384|T4096" $OUT/whatif.err | grep -v automatic | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-170
st whatif
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
HYDRA_GDN_SCAN=4 timeout 150 $NCU --clock-control none -k regex:"gdn_fwd_scan" -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart --section WarpStateStats -o /tmp/b1scan build-device/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 > /tmp/b1.log 2>&1; echo "ncu b1 rc $?"
$NCU --import /tmp/b1scan.ncu-rep --page details --print-details all > $OUT/b1scan_details.txt 2>&1
grep -E "Throughput|Duration|L2|Bandwidth|Hit|Stall|Warp Cycles" $OUT/b1scan_details.txt | head -40
st b1
SEC="--section WarpStateStats --section SourceCounters --section SchedulerStats --section SpeedOfLight --section Occupancy"
timeout 150 $NCU --clock-control none -k regex:"gdn_fwd_prep" -c 1 $SEC -o /tmp/prep build-device/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/prep.log 2>&1; echo "ncu prep rc $?"
$NCU --import /tmp/prep.ncu-rep --page details --print-details all > $OUT/prep_details.txt 2>&1
$NCU --import /tmp/prep.ncu-rep --page source --csv --print-source sass > $OUT/prep_sass.csv 2>/dev/null; gzip -9 $OUT/prep_sass.csv
grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Block Limit|Stall" $OUT/prep_details.txt | head -30
st done
