#!/usr/bin/env bash
# call BG: the per-chunk backward's closing sums by a warp (dg's suffix sums and glast's sum were one thread's
# serial loops) -- build-device-new/ (main + that, -lineinfo) against build-device-exp/ (main's kernels, the
# merged exp/gdn-twelfth); parity of gdn; B8 alternating; ncu of the new per-chunk backward with CUDA source lines.
# Carry: .devdeps/scripts build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
#        build-device-new/cuda_op_parity build-device-new/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_bg] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device-new/cuda_op_parity --only gdn > $OUT/parity_new.txt 2>&1; echo "new gdn parity rc $?: $(grep -E 'passed' $OUT/parity_new.txt)"; grep FAIL $OUT/parity_new.txt | head -5
grep -E "dg|dbeta" $OUT/parity_new.txt | head -12
st parity
for r in 1 2 3; do
  for b in build-device-exp build-device-new; do
    timeout 30 $b/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/s.jsonl 2> /tmp/s.err
    echo "$b B8 run $r: $(grep -oE '"op": "gdn_(fwd|fwdbwd|fwd_graph)"[^}]*"ms": [0-9.]+' /tmp/s.jsonl | sed 's/"op": //; s/, "B".*"ms"//' | tr '\n' ' ') $(grep profile /tmp/s.err | grep backward | sed 's/\[gdn profile\]//')"
  done
done
timeout 60 build-device-new/cuda_gdn_attention_bench --gdn-only > $OUT/new.jsonl 2> $OUT/new.err; echo "new rc $?"
grep -E '"gdn_fwdbwd"' $OUT/new.jsonl | cut -c1-100
grep profile $OUT/new.err | grep backward | sed 's/\[gdn profile\]//'
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 120 $NCU --clock-control none -k regex:"gdn_bwd_chunk" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --import-source yes --source-folders $PWD/src/ops/cuda -o /tmp/bchunk \
  build-device-new/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; tail -3 /tmp/ncu.log
$NCU --import /tmp/bchunk.ncu-rep --page source --csv --print-source cuda > $OUT/bchunk_cuda.csv 2>$OUT/bchunk_cuda.err; echo "cuda csv rc $? $(wc -l < $OUT/bchunk_cuda.csv)"; head -c 300 $OUT/bchunk_cuda.err
$NCU --import /tmp/bchunk.ncu-rep --page source --csv --print-source sass > $OUT/bchunk_sass.csv 2>/dev/null; gzip -9 $OUT/bchunk_sass.csv; gzip -9 $OUT/bchunk_cuda.csv
$NCU --import /tmp/bchunk.ncu-rep --page details > $OUT/bchunk_details.txt 2>&1
grep -E "Duration|Warp Cycles Per Issued|Issued Ipc|No Eligible" $OUT/bchunk_details.txt | head
st done
