#!/usr/bin/env bash
# call CI: the producer-warp tile-copy scans after call CH, held to 112 registers (CH's 127-register block left
# no room for a prep block in an SM sub-partition's registers: B2 streamed took 11 ms), and the stage's
# copies on two barriers (full: W, Q, U, scalars for phase A; later: K, P after the middle barrier).
# HYDRA_GDN_SCAN_ONE_FULL builds (new3one/) keep one barrier. Parity; the forward from graphs, tip fef10c6
# (x/) against both; the default build's phase clocks (clk/, -DHYDRA_GDN_SCAN_CLOCKS) at B1 and B2.
# Build here: BUILD_DIR=build-device-new3 tools/device_build.sh;
#             NVEXTRA=-DHYDRA_GDN_SCAN_ONE_FULL BUILD_DIR=build-device-new3one tools/device_build.sh
#             NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-new3clk tools/device_build.sh
# Carry: .devdeps/scripts build-carry (x/ bench; new/ parity + bench; one/ parity + bench; clk/ bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ci] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 200 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 100 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
done
HYDRA_GDN_STREAM=0 timeout 100 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn unstreamed rc $?: $(tail -n 1 $OUT/p.txt)"
timeout 100 build-carry/one/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "one-barrier build: parity gdn rc $?: $(tail -n 1 $OUT/p.txt)"
rm -f $OUT/p.txt
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64"
for r in 1 2; do for b in x new one; do
  timeout 120 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>/dev/null
  sed "s/^/$b $r /" $OUT/b.jsonl >> $OUT/bench_abc.txt
  echo "$b $r: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
done; done
rm -f $OUT/b.jsonl
st timing
C=build-carry/clk
SH2="--shape 1x65536x16x128 --shape 2x16384x16x128"
timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH2 > /dev/null 2> $OUT/clk_streamed.err; echo "streamed rc $?"
HYDRA_GDN_PARTS=1 timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH2 > /dev/null 2> $OUT/clk_alone.err; echo "alone rc $?"
grep -E "scan clocks\] (variant|warp  [047])|^B|profile\] forward" $OUT/clk_streamed.err $OUT/clk_alone.err | grep -v saving | head -60
st done
