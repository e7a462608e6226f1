#!/usr/bin/env bash
# call CG: the tile-copy scans' cluster handshake made cheaper (call CF's phase clocks: the remote arrival,
# release at cluster scope, cost warp 0 ~330 cycles a chunk; the copy issuer's warp spent ~850 cycles more than
# the other Q-row warps in its copy issue): the arrival with default (CTA-scope) semantics, by the first Q-row
# warp; the issuer's wait with default semantics; its proxy fence only when streamed; __expf in the scan's
# epilogues. Parity of the new build; the forward from graphs, tip (fef10c6, build X) against new, alternating;
# the new build's phase clocks (the issuer's copy issue split into its wait and its issue).
# Build here: BUILD_DIR=build-device-new tools/device_build.sh;
#             NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-newclk tools/device_build.sh
# Carry: .devdeps/scripts build-carry (x/: the tip's bench; new/: cuda_op_parity, bench; newclk/: bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cg] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 200 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 100 $N/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
done
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64"
for r in 1 2; do
  for b in x new; do
    timeout 120 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/bench_${b}_$r.jsonl 2>/dev/null
    echo "$b run $r: $(grep '"gdn_fwd_graph"' $OUT/bench_${b}_$r.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 T\2 D\3 \4/' | tr '\n' ' ')"
  done
done
st timing
C=build-carry/newclk
timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH > /dev/null 2> $OUT/clk_streamed.err; echo "streamed rc $?"
HYDRA_GDN_PARTS=1 timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH > /dev/null 2> $OUT/clk_alone.err; echo "alone rc $?"
grep -E "scan clocks|^B|profile\] forward" $OUT/clk_streamed.err $OUT/clk_alone.err | head -120
st done
