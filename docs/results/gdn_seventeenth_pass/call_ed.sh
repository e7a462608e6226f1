#!/usr/bin/env bash
# call ED (seventeenth pass): the final state of main (kernels of 407330d; the bench with the decode state's
# copy row): op parity (all, gdn with scans 3 and 5 forced), training-op parity, the full GDN benchmark, two
# more d 64 forward runs, and fla's decode and d 64 forward rows in the same call (its d 128 rows, whose
# autotuning takes minutes, were left out: device time; call DD has them against the same kernels).
# Build here: BUILD_DIR=build-device-sf tools/device_build.sh (copied to build-carry/main).
# Carry: .devdeps/scripts build-carry (main/) .peer (fla bc3b101d)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ed] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/main
timeout 150 $N/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i "fail" $OUT/parity.txt | grep -v " 0 failed" | head -5
for sc in 3 5; do
  timeout 60 $N/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1; echo "parity gdn scan $sc rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3
done
timeout 60 $N/cuda_train_ops_parity > $OUT/p.txt 2>&1; echo "train ops parity rc $?: $(tail -n 1 $OUT/p.txt)"
rm -f $OUT/p.txt
st parity
timeout 200 $N/cuda_gdn_attention_bench --gdn-only > $OUT/ours.jsonl 2>$OUT/ours.err; echo "bench rc $?"
for r in 1 2; do
  timeout 60 $N/cuda_gdn_attention_bench --gdn-only --shape 8x4096x9x64 2>/dev/null | grep '"gdn_fwd_graph"' | sed "s/^/extra$r /" >> $OUT/d64_extra.txt
done
cat $OUT/d64_extra.txt
st ours
FLA_PATH=.peer timeout 100 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --decode-only --json $OUT/peers_decode.json > $OUT/peers_decode.txt 2>&1; echo "peers decode rc $?"
grep -E "^(gdn_|state_)" $OUT/peers_decode.txt
st "fla decode"
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/ours.jsonl --shape 8x4096x9x64 --json $OUT/peers_d64.json > $OUT/peers_d64.txt 2>&1; echo "peers d64 rc $?"
grep -E "^(gdn_|state_)" $OUT/peers_d64.txt
st done
