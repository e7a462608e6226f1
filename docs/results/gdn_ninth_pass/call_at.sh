#!/usr/bin/env bash
# call AT (next session's first): branch exp/gdn-ninth (worktree /work/wt-ninth; binaries in build-device-exp/,
# built there with BUILD_DIR=/work/main/build-device-exp tools/device_build.sh) against main (build-device/):
# the branch's bf16 tiles stored in whole sectors (prep W / U / P, per-chunk backward dq / dk / dv at d 128,
# forward scan O for scan variants 1-3) and the prep's V in a second copy group. Parity of the branch (full; the
# 8-warp backward; scans 1, 2, 3, 7, 8 forced: O changed in 1-3, delta and d delta in all), both benches, ncu of the prep and
# the per-chunk backward (are the excess L2 sectors of call AO / AS gone?), fla in the same call.
# build-device-exp2/ holds the bench at the branch's commit b5fa55b (prep V copy group, prep and per-chunk
# backward tile stores; no scan changes), built with BUILD_DIR=/work/main/build-device-exp2 in a worktree
# there, so the scans' share of the difference shows.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
#        build-device-exp2/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_at] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?"; grep -E "passed" $OUT/parity_exp.txt; grep FAIL $OUT/parity_exp.txt | head -5
HYDRA_GDN_BCHUNK_WARPS=8 timeout 60 build-device-exp/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "bchunk 8 warps: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
for sv in 1 2 3 7 8; do
  timeout 60 build-device-exp/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done; rm -f $OUT/p.txt
st parity
for b in build-device build-device-exp2 build-device-exp; do
  timeout 120 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$(basename $b).jsonl 2> $OUT/$(basename $b).err; echo "$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/$(basename $b).jsonl | cut -c1-110
  grep -E "profile|T4096|T16384|T65536" $OUT/$(basename $b).err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for k in gdn_fwd_prep gdn_bwd_chunk; do
  timeout 90 $NCU --clock-control none -k regex:"$k" -c 1 --section SourceCounters --section SpeedOfLight \
    --section MemoryWorkloadAnalysis -o /tmp/$k build-device-exp/cuda_gdn_attention_bench --gdn-only \
    --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
  echo "ncu $k rc $?"; $NCU --import /tmp/$k.ncu-rep --page details > $OUT/${k}_details.txt 2>&1
  grep -E "Duration|L1/TEX Cache|L2 Cache Throughput|excessive" $OUT/${k}_details.txt | head -6
done
st ncu
FLA_PATH=.peer timeout 400 python3 bench/cuda_peers.py --ours $OUT/build-device-exp.jsonl --gdn-only > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers.txt | tail -22
st done
