#!/usr/bin/env bash
# call DC (sixteenth pass): the streamed forward without the memset of its ready flags before the kernels (a
# whole-head scan clears its pair's flags as it ends; slices get a memset after the join) (reset/); the op parity
# now checks the plain forward too, after a forward on the same workspace. The forward from graphs against main's
# tip b0c5572 (base/) at d 64 (three rounds) and d 128; a timeline of the streamed d 64 forward (tl/: reset/ built
# with -DHYDRA_GDN_SCAN_CLOCKS, global-timer stamps per block); fla's d 64 forward.
# Build here: BUILD_DIR=build-device-reset tools/device_build.sh; NVEXTRA=-DHYDRA_GDN_SCAN_CLOCKS BUILD_DIR=build-device-tl ...
# Carry: .devdeps/scripts build-carry (base/ reset/ tl/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_dc] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/reset
timeout 150 $N/cuda_op_parity > $OUT/parity_reset.txt 2>&1; echo "reset parity rc $?: $(tail -n 1 $OUT/parity_reset.txt)"
grep -i "fail" $OUT/parity_reset.txt | grep -v " 0 failed" | head -5
for sc in 3 4 5 8; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "reset parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
for e in HYDRA_GDN_STREAM=0 HYDRA_GDN_PREP_WARPS=8; do
  env $e timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "reset parity gdn $e rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
timeout 60 $N/cuda_train_ops_parity > $OUT/p.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/p.txt)"
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
  run "base$r" base X=1
  run "reset$r" reset X=1
done
st d64
run tl tl X=1
grep -E "^tl .*(gdn timeline|scan clocks|profile\] forward:)" $OUT/bench_err.txt | head -40
st timeline
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run base128 base X=1
run reset128 reset X=1
st d128
grep '"gdn_fwd_graph"' $OUT/bench_ab.txt | grep '"D": 64' | grep -E "^reset1 " | sed 's/^reset1 //' > $OUT/ours_d64.jsonl
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/ours_d64.jsonl --shape 8x4096x9x64 --json $OUT/peers_d64.json > $OUT/peers_d64.txt 2>&1; echo "peers rc $?"
grep -E "gdn_" $OUT/peers_d64.txt | tail -n 4
rm -f $OUT/b.jsonl $OUT/b.err
st done
