#!/usr/bin/env bash
# call CF: main's tip fef10c6 (the prep review, only compile-checked last session) run on the GPU: the whole
# parity program, gdn with scans 4 and 5 forced and with the 4-warp prep. Then a diagnostic build
# (-DHYDRA_GDN_SCAN_CLOCKS) times the forward scan's loop phases per warp (cycles a chunk) at B1 T65536, B2
# T16384 (d 128) and B8 H9 d 64, streamed (the prep beside) and with the scan alone (HYDRA_GDN_PARTS=1).
# Build here: BUILD_DIR=build-device-X tools/device_build.sh;
#             NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-clk tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (cf/: the tip's cuda_op_parity; clk/: the
# diagnostic cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cf] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/cf
timeout 200 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i fail $OUT/parity.txt | head -5
for sc in 4 5; do
  timeout 100 $B/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/parity_scan$sc.txt)"
done
HYDRA_GDN_PREP_WARPS=4 timeout 100 $B/cuda_op_parity --only gdn > $OUT/parity_prep4.txt 2>&1; echo "parity gdn prep 4 rc $?: $(tail -n 1 $OUT/parity_prep4.txt)"
st parity
C=build-carry/clk
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64"
timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH > $OUT/clk_streamed.jsonl 2> $OUT/clk_streamed.err; echo "streamed rc $?"
HYDRA_GDN_PARTS=1 timeout 150 $C/cuda_gdn_attention_bench --gdn-only $SH > $OUT/clk_alone.jsonl 2> $OUT/clk_alone.err; echo "alone rc $?"
grep -E '"gdn_fwd_graph"' $OUT/clk_streamed.jsonl $OUT/clk_alone.jsonl | cut -c1-140
grep -E "scan clocks|^B|profile\] forward:" $OUT/clk_streamed.err $OUT/clk_alone.err | grep -v "saving" | head -120
st done
