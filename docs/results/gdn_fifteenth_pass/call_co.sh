#!/usr/bin/env bash
# call CO (the pass's last): two builds of main plus this pass's changes. prep/: the prep's T in A's array at
# d 64 (old layout at d 128), the 4-warp prep the default at d 64, wait_ready's 10 s stop (CN's kernels without
# the scan-first order). full/: prep/ plus the forward scan's Q-row warps pairing P delta's 16-row blocks {0, 3}
# and {1, 2} with each m-tile's own k-steps. Parity of both; the forward from graphs against main's tip (ck/);
# then the full benchmark and fla with full/ if its parity passed, else prep/.
# Build here: BUILD_DIR=build-device-full tools/device_build.sh (and build-device-prep without the scan change)
# Carry: .devdeps/scripts build-carry (ck/ prep/ full/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_co] $(( $(date +%s) - t0 )) s: $*"; }
ok=()
for b in full prep; do
  B=build-carry/$b; good=1
  timeout 150 $B/cuda_op_parity > $OUT/parity_$b.txt 2>&1; rc=$?; echo "$b parity rc $rc: $(tail -n 1 $OUT/parity_$b.txt)"; [ $rc = 0 ] || good=0
  grep -i "fail" $OUT/parity_$b.txt | grep -v " 0 failed" | head -5
  scans="4 5"; [ $b = full ] && scans="0 1 2 3 4 5 6 8"
  for sc in $scans; do
    timeout 60 $B/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; rc=$?; echo "$b parity gdn scan $sc rc $rc: $(tail -n 1 $OUT/p.txt)"; [ $rc = 0 ] || good=0
  done
  for e in HYDRA_GDN_STREAM=0 HYDRA_GDN_PREP_WARPS=8; do
    env $e timeout 60 $B/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; rc=$?; echo "$b parity gdn $e rc $rc: $(tail -n 1 $OUT/p.txt)"; [ $rc = 0 ] || good=0
  done
  [ $good = 1 ] && ok+=($b)
  st "parity $b"
done
timeout 60 build-carry/full/cuda_train_ops_parity > $OUT/p.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/p.txt)"
rm -f $OUT/p.txt
run() {  # label, binary dir, env...; shapes from SH
  local lab=$1 b=$2; shift 2
  env "$@" timeout 100 build-carry/$b/cuda_gdn_attention_bench --gdn-only $SH > $OUT/b.jsonl 2>$OUT/b.err
  sed "s/^/$lab /" $OUT/b.jsonl >> $OUT/bench_ab.txt
  echo "$lab: $(grep '"gdn_fwd_graph"' $OUT/b.jsonl | sed -E 's/.*"B": ([0-9]+), "T": ([0-9]+).*"D": ([0-9]+), "ms": ([0-9.]+).*/B\1 D\3 \4/' | tr '\n' ' ')"
}
SH="--shape 8x4096x9x64"
for r in 1 2; do for b in ck prep full; do run "$b$r" $b X=1; done; done
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
for b in ck prep full; do run "${b}128" $b X=1; done
rm -f $OUT/b.jsonl $OUT/b.err
st ab
W=${ok[0]:-none}; echo "benchmark build: $W"
[ $W = none ] && exit 1
timeout 150 build-carry/$W/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|ratio" $OUT/peers.txt | tail -n 16
st done
