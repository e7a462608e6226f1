#!/usr/bin/env bash
# call BM: (1) is call BL's one parity miss (B1 T37 D128 dg 1.2e-2, seed 1796198865985358165) a race or the
# inputs? The same seed re-run on the clustered build (BL's), with its clusters off, and on main with the
# tf32_tile clean-up; a race moves the error between runs of one build, the inputs do not. (2) The whole
# parity program and the training-op parity on main. (3) The GDN bench on main (kernels unchanged but the
# per-chunk backward's tf32_tile), against call BJ's run of the same kernels (fla not re-run: its autotune
# takes five of the session's remaining device minutes).
# Build here: BUILD_DIR=build-device-main2 tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (main/: build-device-main2 binaries; mc/: call BL's cuda_op_parity)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bm] $(( $(date +%s) - t0 )) s: $*"; }
S=1796198865985358165
run_seed() {  # label, build, env...
  local label=$1 b=$2; shift 2
  env "$@" timeout 100 $b/cuda_op_parity --only gdn --scan 3 --seed $S > /tmp/p.txt 2>&1
  echo "$label rc $? $(grep -c FAIL /tmp/p.txt) FAIL: $(grep 'T37 H1 HV1 D128  *dg' /tmp/p.txt | grep -v scan | head -1 | awk '{print $(NF-1), $NF}') | scan 3: $(grep 'T37 H1 HV1 D128 scan 3 *dg' /tmp/p.txt | head -1 | awk '{print $(NF-1)}')"
}
for i in 1 2 3; do run_seed "mc#$i" build-carry/mc HYDRA_X=1; done | tee $OUT/race.txt
for i in 1 2; do run_seed "mc-off#$i" build-carry/mc HYDRA_GDN_SCAN_CLUSTER=0; done | tee -a $OUT/race.txt
for i in 1 2 3; do run_seed "main#$i" build-carry/main HYDRA_X=1; done | tee -a $OUT/race.txt
st race
timeout 300 build-carry/main/cuda_op_parity > $OUT/parity_main.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity_main.txt)"
timeout 200 build-carry/main/cuda_train_ops_parity > $OUT/train_parity_main.txt 2>&1; echo "train parity rc $?: $(tail -n 2 $OUT/train_parity_main.txt | tr '\n' ' ')"
st parity
timeout 200 build-carry/main/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2> $OUT/ours.err; echo "bench rc $?"
st bench
grep -E "fwd_graph|fwdbwd\"" $OUT/ours.jsonl | cut -c1-140
st done
