#!/usr/bin/env bash
# call EC (seventeenth pass): GDN decode step variants (HYDRA_GDN_DECODE): 0 main (4 warps x 8 rows a block),
# 1 (x 4 rows), 2 (x 16 rows), 3 persistent 4-row items with the next item's state loaded before the current
# is computed (up to 16 blocks an SM), 4 the same with 8-row items, 5 persistent 4-row items, up to 8 blocks
# an SM. The decode parity per variant (gdn ops); decode rows from graphs per variant, three rounds, with the
# state copy of the same bytes; fla's decode in the same call.
# Build here: BUILD_DIR=build-device-sf tools/device_build.sh. Carry: .devdeps/scripts build-carry (sf/) .peer
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ec] $(( $(date +%s) - t0 )) s: $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
N=build-carry/sf
for m in 0 1 2 3 4 5; do
  HYDRA_GDN_DECODE=$m timeout 60 $N/cuda_op_parity --only gdn > $OUT/p.txt 2>&1; echo "parity gdn decode $m rc $?: $(tail -n 1 $OUT/p.txt)"
  grep -i "fail" $OUT/p.txt | grep -v " 0 failed" | head -3; grep "gdn_decode" $OUT/p.txt | head -6 > $OUT/pd$m.txt
done
cat $OUT/pd3.txt; rm -f $OUT/p.txt $OUT/pd*.txt
st parity
for r in 1 2 3; do
  for m in 0 1 2 3 4 5; do
    HYDRA_GDN_DECODE=$m timeout 60 $N/cuda_gdn_attention_bench --decode-only > $OUT/b.jsonl 2>/dev/null
    sed "s/^/m$m.$r /" $OUT/b.jsonl >> $OUT/decode_ab.txt
    echo "m$m.$r: $(grep -E '"(gdn_decode_graph|state_copy_graph|gdn_decode)"' $OUT/b.jsonl | sed -E 's/.*"op": "([a-z_]+)".*"D": ([0-9]+), "ms": ([0-9.]+).*/\1 d\2 \3/' | tr '\n' ' ')"
  done
done
st decode
HYDRA_GDN_DECODE=0 $N/cuda_gdn_attention_bench --decode-only > $OUT/ours_decode.jsonl 2>/dev/null
FLA_PATH=.peer timeout 200 python3 bench/cuda_peers.py --ours $OUT/ours_decode.jsonl --decode-only --json $OUT/peers_decode.json > $OUT/peers_decode.txt 2>&1; echo "peers rc $?"
grep -E "gdn_|state" $OUT/peers_decode.txt | tail -n 8
rm -f $OUT/b.jsonl
st done
