#!/usr/bin/env bash
# call DA (sixteenth pass): the prep's warp roles rotated by warp-slot group (HYDRA_GDN_PREP_ROTATE, default 1)
# and W / U by pairs of row blocks {0, 3}, {1, 2} (new/; nop/ is new/ built with -DHYDRA_GDN_PREP_PAIRS=0).
# Parity of new/ (and nop/'s gdn); the forward from graphs against main's tip b0c5572 (base/) at d 64 and
# d 128, each build with the rotation on and off; the prep alone (HYDRA_GDN_PARTS=1); fla's d 64 forward.
# Build here: BUILD_DIR=build-device-new tools/device_build.sh (nop: NVEXTRA=-DHYDRA_GDN_PREP_PAIRS=0)
# Carry: .devdeps/scripts build-carry (base/ new/ nop/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_da] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/new
timeout 150 $N/cuda_op_parity > $OUT/parity_new.txt 2>&1; echo "new parity rc $?: $(tail -n 1 $OUT/parity_new.txt)"
grep -i "fail" $OUT/parity_new.txt | grep -v " 0 failed" | head -5
for sc in 3 4 5; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "new parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
done
for e in HYDRA_GDN_STREAM=0 HYDRA_GDN_PREP_WARPS=8 "HYDRA_GDN_PREP_WARPS=4 HYDRA_GDN_STREAM=0" HYDRA_GDN_PREP_ROTATE=0; do
  env $e timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "new parity gdn $e rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
timeout 60 build-carry/nop/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "nop parity gdn rc $?: $(tail -n 1 $OUT/p.txt)"
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
for r in 1 2; do
  run "base$r" base X=1
  run "new$r" new X=1
  run "newr0_$r" new HYDRA_GDN_PREP_ROTATE=0
  run "nop$r" nop X=1
  run "nopr0_$r" nop HYDRA_GDN_PREP_ROTATE=0
done
st d64
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run base128 base X=1
run new128 new X=1
run newr0_128 new HYDRA_GDN_PREP_ROTATE=0
run nop128 nop X=1
st d128
SH="--shape 8x4096x9x64 --shape 8x4096x16x128"
for b in base new nop; do run "alone_$b" $b HYDRA_GDN_PARTS=1; done
run alone_newr0 new HYDRA_GDN_PARTS=1 HYDRA_GDN_PREP_ROTATE=0
grep -E "^alone_.*profile\] forward:" $OUT/bench_err.txt
st alone
grep '"gdn_fwd_graph"' $OUT/bench_ab.txt | grep '"D": 64' | grep -E "^new1 " | sed 's/^new1 //' > $OUT/ours_d64.jsonl
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/ours_d64.jsonl --shape 8x4096x9x64 --json $OUT/peers_d64.json > $OUT/peers_d64.txt 2>&1; echo "peers rc $?"
grep -E "gdn_" $OUT/peers_d64.txt | tail -n 8
rm -f $OUT/b.jsonl $OUT/b.err
st done
