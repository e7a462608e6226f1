#!/usr/bin/env bash
# call AU: branch exp/gdn-tenth (worktree /work/wt-tenth, binaries build-device-exp/): the prep's off-diagonal
# blocks of T = (I + A)^-1 on tensor cores (3xTF32) instead of float4 FMA loops, against main 81fe916+ (build-device/).
# Parity of the branch (full; forward in 2 parts), both benches, the d 64 forward in 2 parts (env), ncu of the
# branch's prep (details + per-instruction source CSV). No fla (next call).
# Carry: .devdeps/scripts build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_au] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?"; grep -E "passed" $OUT/parity_exp.txt; grep FAIL $OUT/parity_exp.txt | head -5
HYDRA_GDN_PARTS=2 timeout 60 build-device-exp/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "2 parts: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
st parity
for rep in 1 2; do
for b in build-device build-device-exp; do
  timeout 120 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$(basename $b)_$rep.jsonl 2> $OUT/$(basename $b)_$rep.err; echo "$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/$(basename $b)_$rep.jsonl | cut -c1-110
  grep -E "profile|T4096|T16384|T65536" $OUT/$(basename $b)_$rep.err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done; done
for p in 2 4; do
  HYDRA_GDN_PARTS=$p timeout 60 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 8x4096x9x64 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"' | cut -c1-110 | sed "s/^/parts $p /"
done
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 120 $NCU --clock-control none -k regex:"gdn_fwd_prep" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section MemoryWorkloadAnalysis -o /tmp/prep build-device-exp/cuda_gdn_attention_bench --gdn-only \
  --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; $NCU --import /tmp/prep.ncu-rep --page source --csv --print-source sass > $OUT/prep_sass.csv 2>/dev/null; gzip -9 $OUT/prep_sass.csv
$NCU --import /tmp/prep.ncu-rep --page details > $OUT/prep_details.txt 2>&1
grep -E "Duration|L1/TEX Cache|Compute \(SM\)|DRAM Through" $OUT/prep_details.txt | head -5
st done
