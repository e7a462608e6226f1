#!/usr/bin/env bash
# call AW (this session's record): main 0ea2bab (build-device/): parity (full; forward in 2 parts; scans 7 and 8
# forced), the GDN bench (eager rows and the forward from a CUDA graph), ncu of the prep and the forward scan at
# B8 d 128 (per-instruction CSVs and details), fla in the same call (rows in peers.json, table on stdout).
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_aw] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(grep -E 'passed' $OUT/parity.txt)"; grep FAIL $OUT/parity.txt | head -5
HYDRA_GDN_PARTS=2 timeout 60 build-device/cuda_op_parity --only gdn > /tmp/p.txt 2>&1; echo "2 parts: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
for sv in 7 8; do
  timeout 60 build-device/cuda_op_parity --only gdn --scan $sv > /tmp/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' /tmp/p.txt)"; grep FAIL /tmp/p.txt | head -2
done
st parity
timeout 150 build-device/cuda_gdn_attention_bench --gdn-only > $OUT/main.jsonl 2> $OUT/main.err; echo "bench rc $?"
grep -E '"gdn_fwd"|"gdn_fwdbwd"|"gdn_fwd_graph"' $OUT/main.jsonl | cut -c1-100 | sed 's/"impl": "ours", //'
grep -E "profile|T4096|T16384|T65536" $OUT/main.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/' | cut -c1-150
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for k in prep scan; do
  timeout 120 $NCU --clock-control none -k regex:"gdn_fwd_$k" -c 1 --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight --section MemoryWorkloadAnalysis -o /tmp/$k build-device/cuda_gdn_attention_bench --gdn-only \
    --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
  echo "ncu $k rc $?"; $NCU --import /tmp/$k.ncu-rep --page source --csv --print-source sass > $OUT/${k}_sass.csv 2>/dev/null; gzip -9 $OUT/${k}_sass.csv
  $NCU --import /tmp/$k.ncu-rep --page details > $OUT/${k}_details.txt 2>&1
  grep -E "Duration|L1/TEX Cache|Compute \(SM\)|DRAM Through" $OUT/${k}_details.txt | head -4
done
st ncu
FLA_PATH=.peer timeout 420 python3 bench/cuda_peers.py --ours $OUT/main.jsonl --gdn-only --json $OUT/peers.json > /tmp/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" /tmp/peers.txt | tail -24
st done
