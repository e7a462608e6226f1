#!/usr/bin/env bash
# call AO (next session's first): branch exp/gdn-eighth (worktree /work/wt-eighth; binaries in build-device-exp/,
# built there with BUILD_DIR=/work/main/build-device-exp tools/device_build.sh) against main (build-device/):
# full parity of the branch, the 8-warp per-chunk backward, the forward in 2 parts, scans 4, 7 and 8 forced, both
# benches, scan variant 8 at B8, the split forward (HYDRA_GDN_PARTS 2 / 4 / 8) at B1 and B2, ncu of the branch's prep at B8, fla in
# the same call.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ao] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?"; grep -E "passed" $OUT/parity_exp.txt; grep FAIL $OUT/parity_exp.txt | head -5
HYDRA_GDN_BCHUNK_WARPS=8 timeout 60 build-device-exp/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "bchunk 8 warps: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
HYDRA_GDN_PARTS=2 timeout 60 build-device-exp/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "forward in 2 parts: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
for sv in 4 7 8; do
  timeout 60 build-device-exp/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done; rm -f $OUT/p.txt
st parity
for b in build-device build-device-exp; do
  timeout 120 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$(basename $b).jsonl 2> $OUT/$(basename $b).err; echo "$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/$(basename $b).jsonl | cut -c1-110
  grep -E "profile|T4096|T16384|T65536" $OUT/$(basename $b).err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done
for parts in 2 4 8; do  # the split forward (prep of the next range beside the scan), B1 and B2
  HYDRA_GDN_PARTS=$parts timeout 60 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 \
    --shape 2x16384x16x128 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150 | sed "s/^/parts $parts: /"
done
# scan variant 8 (a whole head a block) at B8, where its 128 blocks are one wave
HYDRA_GDN_SCAN=8 timeout 60 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 2>&1 \
  | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150 | sed "s/^/scan 8: /"
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 120 $NCU --clock-control none -k regex:"gdn_fwd_prep" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section MemoryWorkloadAnalysis -o /tmp/prep build-device-exp/cuda_gdn_attention_bench --gdn-only \
  --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; $NCU --import /tmp/prep.ncu-rep --page source --csv --print-source sass > $OUT/prep_sass.csv 2>/dev/null; gzip -9 $OUT/prep_sass.csv
$NCU --import /tmp/prep.ncu-rep --page details > $OUT/prep_details.txt 2>&1
st ncu
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/build-device-exp.jsonl --gdn-only > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -22
st done
