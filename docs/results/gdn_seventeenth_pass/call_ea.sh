#!/usr/bin/env bash
# call EA (seventeenth pass): does the d 64 streamed forward gain when the scan's blocks are resident before
# the prep's first wave? HYDRA_GDN_SCAN_FIRST=0 (main: prep launched first), 1 (scan launched first),
# 2 (scan first, and the prep's stream waits for the scan's launch-completion event: all scan blocks begun).
# Forward from CUDA graphs at B8 T4096 H9 d 64, modes alternated; the timeline (clock build) per mode;
# parity of the gdn ops per mode; d 128 shapes per mode; fla's d 64 forward.
# Build here: BUILD_DIR=build-device-sf tools/device_build.sh; NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-sftl ...
# Carry: .devdeps/scripts build-carry (sf/ sftl/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ea] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/sf
for m in 0 1 2; do
  HYDRA_GDN_SCAN_FIRST=$m timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn mode $m rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
rm -f $OUT/p.txt
st parity
run() {  # label, binary dir, env...; shapes from SH
  local lab=$1 b=$2; shift 2
  env "$@" timeout 100 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>$OUT/b.err
  sed "s/^/$lab /" $OUT/b.jsonl >> $OUT/bench_ab.txt; sed "s/^/$lab /" $OUT/b.err >> $OUT/bench_err.txt
  echo "$lab: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
}
SH="--shape 8x4096x9x64"
for r in 1 2 3; do
  for m in 0 1 2; do run "m$m.$r" sf HYDRA_GDN_SCAN_FIRST=$m; done
done
st d64
for m in 0 1 2; do
  run "tl$m" sftl HYDRA_GDN_SCAN_FIRST=$m
  grep -E "^tl$m .*(gdn timeline)" $OUT/bench_err.txt | head -24
done
st timeline
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
for m in 0 2; do run "d128m$m" sf HYDRA_GDN_SCAN_FIRST=$m; done
st d128
grep '"gdn_fwd_graph"' $OUT/bench_ab.txt | grep '"D": 64' | grep -E "^m2.1 " | sed 's/^m2.1 //' > $OUT/ours_d64.jsonl
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/ours_d64.jsonl --shape 8x4096x9x64 --json $OUT/peers_d64.json > $OUT/peers_d64.txt 2>&1; echo "peers rc $?"
grep -E "gdn_" $OUT/peers_d64.txt | tail -n 4
rm -f $OUT/b.jsonl $OUT/b.err
st done
