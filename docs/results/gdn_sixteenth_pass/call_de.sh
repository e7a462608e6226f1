#!/usr/bin/env bash
# call DE (sixteenth pass, merged build): the flag clearing at d 64 only (whole heads: no memset before the kernels;
# slices: the pair's last block clears, the memset kept), d 128 as main (memset before each forward, no clearing
# code). Parity; the forward from graphs against main's tip b0c5572 (base/) at d 64 and d 128; fla's d 64 forward.
# Build here: BUILD_DIR=build-device-final2 tools/device_build.sh
# Carry: .devdeps/scripts build-carry (base/ final2/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_de] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/final2
timeout 150 $N/cuda_op_parity > $OUT/parity_final2.txt 2>&1; echo "final2 parity rc $?: $(tail -n 1 $OUT/parity_final2.txt)"
grep -i "fail" $OUT/parity_final2.txt | grep -v " 0 failed" | head -5
for sc in 3 5; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "final2 parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
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
for r in 1 2; do run "base$r" base X=1; run "final2_$r" final2 X=1; done
st d64
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run base128 base X=1
run final2_128 final2 X=1
rm -f $OUT/b.err
st d128
grep '"gdn_fwd_graph"' $OUT/bench_ab.txt | grep '"D": 64' | grep -E "^final2_1 " | sed 's/^final2_1 //' > $OUT/ours_d64.jsonl
FLA_PATH=.peer timeout 150 python3 bench/cuda_peers.py --ours $OUT/ours_d64.jsonl --shape 8x4096x9x64 --json $OUT/peers_d64.json > $OUT/peers_d64.txt 2>&1; echo "peers rc $?"
grep -E "gdn_" $OUT/peers_d64.txt | tail -n 4
st done
