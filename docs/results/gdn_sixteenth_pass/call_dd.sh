#!/usr/bin/env bash
# call DD (sixteenth pass, final): the streamed forward's flags cleared by the scan as it ends (the pair's last
# block; slices count their blocks per pair), no memset before the kernels (final/). The op parity checks the plain
# forward too, after another forward on the same workspace. The forward from graphs against main's tip b0c5572
# (base/) at d 64 and d 128; then the whole GDN benchmark of final/ and fla's GDN rows (decode, chunk forward and
# forward+backward at every shape) in the same call.
# Build here: BUILD_DIR=build-device-final tools/device_build.sh
# Carry: .devdeps/scripts build-carry (base/ final/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_dd] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/final
timeout 150 $N/cuda_op_parity > $OUT/parity_final.txt 2>&1; echo "final parity rc $?: $(tail -n 1 $OUT/parity_final.txt)"
grep -i "fail" $OUT/parity_final.txt | grep -v " 0 failed" | head -5
for sc in 3 4 5 8; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "final parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
HYDRA_GDN_STREAM=0 timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "final parity gdn HYDRA_GDN_STREAM=0 rc $?: $(tail -n 1 $OUT/p.txt)"
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
for r in 1 2; do run "base$r" base X=1; run "final$r" final X=1; done
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run base128 base X=1
run final128 final X=1
rm -f $OUT/b.jsonl $OUT/b.err
st ab
timeout 150 $N/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|ratio" $OUT/peers.txt | tail -n 16
st done
