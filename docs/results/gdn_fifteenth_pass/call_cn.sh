#!/usr/bin/env bash
# call CN: CM's build, the head split removed, the streamed forward's scan launched before the prep (prep first
# where kernels are serialised: CUDA_LAUNCH_BLOCKING=1, CUDA_INJECTION64_PATH; HYDRA_GDN_SCAN_FIRST forces it) and
# wait_ready's 10 s stop. Parity (whole program, scans 4 and 5, unstreamed, prep first, with CUDA_LAUNCH_BLOCKING,
# train ops); the 10 s stop checked (scan forced first with blocking launches: must fail with the message); the
# forward from graphs, main's tip (ck/) against the new build, scan first and prep first; the full benchmark and fla.
# Build here: BUILD_DIR=build-device-Z tools/device_build.sh
# Carry: .devdeps/scripts build-carry (ck/: main's tip; new/: this build) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cn] $(( $(date +%s) - t0 )) s: $*"; }
N=build-carry/new
timeout 150 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 4 5; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
done
for e in HYDRA_GDN_STREAM=0 HYDRA_GDN_SCAN_FIRST=0 CUDA_LAUNCH_BLOCKING=1; do
  env $e timeout 100 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn $e rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
timeout 60 $N/cuda_train_ops_parity > $OUT/train_ops_parity.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/train_ops_parity.txt)"
st parity
CUDA_LAUNCH_BLOCKING=1 HYDRA_GDN_SCAN_FIRST=1 timeout 40 $N/cuda_op_parity --only gdn > $OUT/stop.txt 2>&1; echo "forced scan first, blocking launches: rc $? (must fail)"
grep -m2 -E "hydra: a GDN scan|error|Error" $OUT/stop.txt | cut -c1-300
rm -f $OUT/p.txt
st stop
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
  run "prepfirst$r" new HYDRA_GDN_SCAN_FIRST=0
  run "w8_$r" new HYDRA_GDN_PREP_WARPS=8
done
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x16x128"
run ck128 ck X=1
run new128 new X=1
run prepfirst128 new HYDRA_GDN_SCAN_FIRST=0
rm -f $OUT/b.jsonl $OUT/b.err
st ab
timeout 150 $N/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
grep -E '"gdn_fwd_graph"|"gdn_fwdbwd"' $OUT/ours.jsonl | cut -c1-120
st bench
FLA_PATH=.peer timeout 330 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --gdn-only --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|ratio" $OUT/peers.txt | tail -n 16
st done
