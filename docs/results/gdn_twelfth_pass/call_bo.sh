#!/usr/bin/env bash
# call BO: the forward scan with tensor-map tile copies (branch exp/scan-tma): W, Q, K as 64 x 64 tiles with a
# 128-byte swizzle, one copy instruction a tile, multicast to the head's slice blocks where clusters fit.
# Parity of gdn (automatic scan; scans 4, 5, 3 forced; scan 4 with tile copies but no clusters), then
# forward / forward+backward: tiles in clusters, tiles without clusters, cp.async (HYDRA_GDN_SCAN_TILES=0),
# alternating twice; then the scan alone (HYDRA_GDN_PARTS=1) at B1 and B2.
# Build here: BUILD_DIR=build-device-tma tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (tma/: build-device-tma's cuda_op_parity and
# cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bo] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/tma
for sc in auto 4 5 3 4nc; do
  case $sc in
    auto) timeout 120 $B/cuda_op_parity --only gdn > $OUT/p.txt 2>&1 ;;
    4nc) HYDRA_GDN_SCAN_CLUSTER=0 timeout 120 $B/cuda_op_parity --only gdn --scan 4 > $OUT/p.txt 2>&1 ;;
    *) timeout 120 $B/cuda_op_parity --only gdn --scan $sc > $OUT/p.txt 2>&1 ;;
  esac
  echo "parity $sc rc $?: $(tail -n 1 $OUT/p.txt)"; grep FAIL $OUT/p.txt | head -3; cat $OUT/p.txt >> $OUT/parity_all.txt
done
rm -f $OUT/p.txt
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 4x8192x16x128 --shape 8x4096x16x128 --shape 8x4096x9x64"
for rep in 1 2; do
  for mode in tiles nocl off; do
    case $mode in tiles) E="HYDRA_X=1";; nocl) E="HYDRA_GDN_SCAN_CLUSTER=0";; off) E="HYDRA_GDN_SCAN_TILES=0";; esac
    env $E timeout 200 $B/cuda_gdn_attention_bench --gdn-only $SH > /tmp/r.jsonl 2> /tmp/r.err
    echo "rc $? $mode rep $rep"
    sed "s/^{/{\"mode\": \"$mode\", \"rep\": $rep, /" /tmp/r.jsonl >> $OUT/bench.jsonl
    { echo "== $mode rep $rep"; cat /tmp/r.err; } >> $OUT/bench.err
  done
done
st bench
for mode in tiles nocl off; do
  case $mode in tiles) E="HYDRA_X=1";; nocl) E="HYDRA_GDN_SCAN_CLUSTER=0";; off) E="HYDRA_GDN_SCAN_TILES=0";; esac
  env $E HYDRA_GDN_PARTS=1 timeout 100 $B/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 --shape 2x16384x16x128 2>&1 >/dev/null | grep -E "forward:|variant" | sed "s/^/alone $mode: /" | uniq
done | tee $OUT/alone.txt
python3 - $OUT/bench.jsonl <<'PY'
import json,sys,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l); d[(r['op'],r['B'],r['T'],r['H'],r['D'],r['mode'])].append(r['ms'])
for k in sorted({k[:5] for k in d}):
    print('%-13s B%d T%d H%d D%d ' % k + '  '.join('%s %s' % (m, ' '.join('%.4f' % x for x in d.get(k + (m,), []))) for m in ('tiles', 'nocl', 'off')))
PY
grep -E "variant" $OUT/bench.err | sort | uniq -c | head
st done
