#!/usr/bin/env bash
# call AK (next session's first): branch exp/gdn-next (worktree /work/wt-bchunk; binaries in build-device-exp/,
# built there with BUILD_DIR=/work/main/build-device-exp tools/device_build.sh) against main (build-device/), in
# one call: full parity of the branch, every scan variant forced, both benches, fla.
# Carry: .devdeps/scripts .peer build-device/cuda_op_parity build-device/cuda_gdn_attention_bench
#        build-device-exp/cuda_op_parity build-device-exp/cuda_gdn_attention_bench
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ak] $(( $(date +%s) - t0 )) s: $*"; }
timeout 150 build-device/cuda_op_parity > $OUT/parity_main.txt 2>&1; echo "main parity rc $?"; grep -E "passed" $OUT/parity_main.txt; grep FAIL $OUT/parity_main.txt | head -5
timeout 150 build-device-exp/cuda_op_parity > $OUT/parity_exp.txt 2>&1; echo "exp parity rc $?"; grep -E "passed" $OUT/parity_exp.txt; grep FAIL $OUT/parity_exp.txt | head -5
for sv in 0 1 2 3 4 5 6 7; do
  timeout 60 build-device-exp/cuda_op_parity --only gdn --scan $sv > $OUT/p.txt 2>&1; echo "scan $sv: $(grep -E 'passed' $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -2
done; rm -f $OUT/p.txt
st parity
for b in build-device build-device-exp; do
  timeout 120 $b/cuda_gdn_attention_bench --gdn-only > $OUT/$(basename $b).jsonl 2> $OUT/$(basename $b).err; echo "$b rc $?"
  grep -E '"gdn_fwd"|"gdn_fwdbwd"' $OUT/$(basename $b).jsonl | cut -c1-110
  grep -E "profile|T4096|T16384|T65536" $OUT/$(basename $b).err | paste - - - - | sed 's/\[gdn profile\]//g; s/forward (saving)/fs/'
done
st bench
# where a B1 forward-scan chunk step (about 1.9 us, 1.5 us with no shared loads in call AE) goes now
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
timeout 120 $NCU --clock-control none -k regex:"gdn_fwd_scan" -c 1 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight -o /tmp/b1scan build-device-exp/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 > /tmp/ncu.log 2>&1
echo "ncu rc $?"; $NCU --import /tmp/b1scan.ncu-rep --page source --csv --print-source sass > $OUT/b1scan_sass.csv 2>/dev/null; gzip -9 $OUT/b1scan_sass.csv
st ncu
FLA_PATH=.peer timeout 420 python3 bench/cuda_peers.py --ours $OUT/build-device-exp.jsonl --gdn-only --json $OUT/summary.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
tail -16 $OUT/peers.txt
st done
