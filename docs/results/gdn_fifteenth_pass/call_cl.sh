#!/usr/bin/env bash
# call CL: the prep with A and T in one shared array (d 64: 58.6 -> 50.4 KB a block, so four blocks an SM and
# two beside a d 64 scan block) and a 64-register 8-warp instantiation (HYDRA_GDN_PREP_BLOCKS=4). Parity of the
# new build (whole program; gdn with prep blocks 4, prep warps 4, unstreamed); the forward from graphs, main's
# tip (ck/) against the new build with each prep configuration; the prep alone (HYDRA_GDN_PARTS=1, profile).
# Build here: BUILD_DIR=build-device-X tools/device_build.sh
# Carry: .devdeps/scripts build-carry (ck/: main's tip; new/: this build)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cl] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 150 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for e in HYDRA_GDN_PREP_BLOCKS=4 HYDRA_GDN_PREP_WARPS=4 HYDRA_GDN_STREAM=0 "HYDRA_GDN_STREAM=0 HYDRA_GDN_PREP_BLOCKS=4"; do
  env $e timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn $e rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
rm -f $OUT/p.txt
st parity
run() {  # label, binary dir, env..., shapes via SH
  local lab=$1 b=$2; shift 2
  env "$@" timeout 100 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>$OUT/b.err
  sed "s/^/$lab /" $OUT/b.jsonl >> $OUT/bench.txt; sed "s/^/$lab /" $OUT/b.err >> $OUT/bench_err.txt
  echo "$lab: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
}
SH="--shape 8x4096x9x64"
for r in 1 2; do
  run "ck$r" ck X=1
  run "new$r" new X=1
  run "pb4_$r" new HYDRA_GDN_PREP_BLOCKS=4
  run "pw4_$r" new HYDRA_GDN_PREP_WARPS=4
done
st d64
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run ck128 ck X=1
run new128 new X=1
st d128
SH="--shape 8x4096x9x64"
run alone_ck ck HYDRA_GDN_PARTS=1
run alone_new new HYDRA_GDN_PARTS=1
run alone_pb4 new HYDRA_GDN_PARTS=1 HYDRA_GDN_PREP_BLOCKS=4
run alone_pw4 new HYDRA_GDN_PARTS=1 HYDRA_GDN_PREP_WARPS=4
grep -E "profile\] (prep|forward)" $OUT/bench_err.txt | grep -v saving | head -60
rm -f $OUT/b.jsonl $OUT/b.err
st done
