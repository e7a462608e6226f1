#!/usr/bin/env bash
# call AL: main with exp/gdn-next's bchunk / pair-store / prep commits (not its scan reordering, slower at B1 / B2
# in call AK): full parity, scans 4 and 7 forced, bench, ncu of the per-chunk backward at B8, fla in the same call
# with its GDN rows also replayed from CUDA graphs.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_al] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_all.txt 2>&1; echo "parity rc $?"; grep -E "passed" $OUT/parity_all.txt; grep FAIL $OUT/parity_all.txt | head -5
for sv in 4 7; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done; rm -f $OUT/p.txt
st parity
timeout 120 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-110
grep -E "profile|T4096|T16384|T65536" $OUT/ours.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 120 $NCU --clock-control none -k regex:"gdn_bwd_chunk" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -o /tmp/bchunk \
  build-device/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; $NCU --import /tmp/bchunk.ncu-rep --page source --csv --print-source sass > $OUT/bchunk_sass.csv 2>/dev/null; gzip -9 $OUT/bchunk_sass.csv
$NCU --import /tmp/bchunk.ncu-rep --page details > $OUT/bchunk_details.txt 2>&1
st ncu
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/summary.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -22
st done
