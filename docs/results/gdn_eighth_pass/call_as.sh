#!/usr/bin/env bash
# call AS (last of the session, ~350 s of device time left): branch exp/gdn-ninth (the prep copies V in a
# second group, waited for only before U) against main 362fb5d, parity of the branch, both benches, ncu of the per-chunk backward at B8 (for the next session), fla's
# B8 d 128 / d 64 rows (--quick) in the same call. Outputs written as they come (the call may be cut).
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_as] $(( $(date +%s) - t0 )) s: $*"; }
timeout 60 build-device-exp/cuda_op_parity --only gdn > $OUT/parity_exp_gdn.txt 2>&1; echo "exp gdn parity rc $? $(grep -E 'passed' $OUT/parity_exp_gdn.txt)"; grep FAIL $OUT/parity_exp_gdn.txt | head -3
st parity
for b in build-device build-device-exp; do
  timeout 60 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$(basename $b).jsonl 2> $OUT/$(basename $b).err; echo "$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/$(basename $b).jsonl | cut -c1-110
  grep -E "profile|T4096|T16384|T65536" $OUT/$(basename $b).err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done
HYDRA_GDN_PREP_BLOCKS=2 timeout 40 build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 \
  --shape 2x16384x16x128 2>&1 | grep -E '"gdn_fwd"|"gdn_fwdbwd"|profile' | cut -c1-150 | sed "s/^/prep 2 blocks: /"
st bench
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 90 $NCU --clock-control none -k regex:"gdn_bwd_chunk" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight --section MemoryWorkloadAnalysis -o /tmp/bchunk \
  build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 8x4096x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; $NCU --import /tmp/bchunk.ncu-rep --page source --csv --print-source sass > $OUT/bchunk_sass.csv 2>/dev/null; gzip -9 $OUT/bchunk_sass.csv
$NCU --import /tmp/bchunk.ncu-rep --page details > $OUT/bchunk_details.txt 2>&1
st ncu
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/build-device-exp.jsonl --gdn-only --quick > $OUT/peers_quick.txt 2>&1; echo "peers rc $?"
grep -v "^{" $OUT/peers_quick.txt | tail -12
st done
