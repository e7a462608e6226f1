#!/usr/bin/env bash
# call AF: prep epilogue / levels rework: gdn parity, timing, prep stall sampling
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_af] $(( $(date +%s) - t0 )) s: $*"; }
timeout 100 build-device/cuda_op_parity --only gdn > $OUT/parity.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity.txt; grep FAIL $OUT/parity.txt | head -5
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110; grep -E "profile|T4096|T16384|T65536" $OUT/ours.err
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
SEC="--section WarpStateStats --section SourceCounters --section SpeedOfLight"
timeout 150 $NCU --clock-control none -k regex:"gdn_fwd_prep" -c 1 $SEC -o /tmp/prep build-device/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/prep.log 2>&1; echo "ncu prep rc $?"
$NCU --import /tmp/prep.ncu-rep --page details --print-details all > $OUT/prep_details.txt 2>&1
$NCU --import /tmp/prep.ncu-rep --page source --csv --print-source sass > $OUT/prep_sass.csv 2>/dev/null; gzip -9 $OUT/prep_sass.csv
grep -E "Duration|Throughput" $OUT/prep_details.txt | head -8
st done
