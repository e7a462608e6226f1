#!/usr/bin/env bash
# call CM: the prep's shared A/T array with a 68-float row (conflict-free transposed reads), the 4-warp prep the
# default at d 64, and the streamed forward's prep launched as a head (HYDRA_GDN_PREP_HEAD rows of chunks, default
# 2) and the rest, so the scan's blocks start at once. Parity; the forward from graphs against main's tip (ck/) at
# d 64 with head rows 0-8 and the 8-warp prep, and at d 128; the prep alone; the scan's phase clocks at d 64.
# Build here: BUILD_DIR=build-device-Y tools/device_build.sh;
#             NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-Yclk tools/device_build.sh
# Carry: .devdeps/scripts build-carry (ck/: main's tip; new/: this build; clk/: its clock build)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cm] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 150 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for e in HYDRA_GDN_PREP_WARPS=8 HYDRA_GDN_PREP_HEAD=0 HYDRA_GDN_PREP_HEAD=8 HYDRA_GDN_STREAM=0 "HYDRA_GDN_STREAM=0 HYDRA_GDN_PREP_WARPS=8"; do
  env $e timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn $e rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
rm -f $OUT/p.txt
st parity
run() {  # label, binary dir, env...; shapes from SH
  local lab=$1 b=$2; shift 2
  env "$@" timeout 100 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>$OUT/b.err
  sed "s/^/$lab /" $OUT/b.jsonl >> $OUT/bench.txt; sed "s/^/$lab /" $OUT/b.err >> $OUT/bench_err.txt
  echo "$lab: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
}
SH="--shape 8x4096x9x64"
for r in 1 2; do
  run "ck$r" ck X=1
  run "new$r" new X=1
  for h in 0 1 4 8; do run "head${h}_$r" new HYDRA_GDN_PREP_HEAD=$h; done
  run "w8_$r" new HYDRA_GDN_PREP_WARPS=8
  run "w8h0_$r" new HYDRA_GDN_PREP_WARPS=8 HYDRA_GDN_PREP_HEAD=0
done
st d64
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run ck128 ck X=1
run new128 new X=1
run new128h0 new HYDRA_GDN_PREP_HEAD=0
st d128
SH="--shape 8x4096x9x64 --shape 8x4096x16x128"
run alone_ck ck HYDRA_GDN_PARTS=1
run alone_new new HYDRA_GDN_PARTS=1
grep -E "^(new1|head0_1|w8_1|ck1|alone_ck|alone_new) .*profile\] (prep|forward)" $OUT/bench_err.txt | grep -v saving | head -40
st timing
C=build-carry/clk
SH="--shape 8x4096x9x64"
for h in 2 0; do
  HYDRA_GDN_PREP_HEAD=$h timeout 60 $C/cuda_gdn_attention_bench --gdn-only $SH > /dev/null 2> $OUT/clk_h$h.err; echo "clk head $h rc $?"
  grep -E "scan clocks\] (variant|warp)|profile\] forward:" $OUT/clk_h$h.err | head -11
done
rm -f $OUT/b.jsonl $OUT/b.err
st done
