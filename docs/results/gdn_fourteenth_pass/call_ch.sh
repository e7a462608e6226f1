#!/usr/bin/env bash
# call CH: the tile-copy scans (variants 4 and 5: B1, B2 at d 128) with a producer warp that issues every copy
# of the block as soon as the cluster has freed the stage (call CG's clocks: the copy-issuing compute warp was
# the last at the middle barrier by ~700 cycles a chunk). Parity of the new build (the whole program; gdn with
# scans 4 and 5 forced; gdn unstreamed; training ops); the forward from graphs, tip fef10c6 (build X) against
# new, alternating, at B1, B2, d 64 and (unchanged kernels, refactored) B8 / B4 d 128; the new phase clocks.
# Build here: BUILD_DIR=build-device-new2 tools/device_build.sh;
#             NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-new2clk tools/device_build.sh
# Carry: .devdeps/scripts build-carry (x/: the tip's bench; new/: cuda_op_parity, bench, train parity; clk/)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ch] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 200 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 100 $N/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
  grep -i "fail" $OUT/parity_scan$sc.txt | grep -v " 0 failed" | head -3
done
HYDRA_GDN_STREAM=0 timeout 100 $N/cuda_op_parity --only gdn > $OUT/parity_nostream.txt 2>&1; echo "parity gdn unstreamed rc $?: $(tail -n 1 $OUT/parity_nostream.txt)"
timeout 150 $N/cuda_train_ops_parity > $OUT/parity_train.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/parity_train.txt)"
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64 --shape 8x4096x16x128 --shape 4x8192x16x128"
for r in 1 2; do
  for b in x new; do
    timeout 150 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>/dev/null
    sed "s/^/$b $r /" $OUT/b.jsonl >> $OUT/bench_all.txt
    echo "$b run $r: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
  done
done
rm -f $OUT/b.jsonl
st timing
C=build-carry/clk
SH2="--shape 1x65536x16x128 --shape 2x16384x16x128"
timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH2 > /dev/null 2> $OUT/clk_streamed.err; echo "streamed rc $?"
HYDRA_GDN_PARTS=1 timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH2 > /dev/null 2> $OUT/clk_alone.err; echo "alone rc $?"
grep -E "scan clocks|^B|profile\] forward:" $OUT/clk_streamed.err $OUT/clk_alone.err | head -60
st done
