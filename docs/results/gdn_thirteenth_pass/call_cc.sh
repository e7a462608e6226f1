#!/usr/bin/env bash
# call CC: the prep computes only its live n-tiles of K K^T, Q K^T and their epilogue (those with an element
# on or below the diagonal) and E by __expf; defaults now the 4-warp prep in the streamed forward and the
# late issue in the tile-copy scans. Parity: the whole program; gdn with the 8-warp prep and the early issue;
# gdn with scans 4 and 5 forced. Bench: default, 8-warp prep (HYDRA_GDN_PREP_WARPS=8), 4-warp prep everywhere
# (=4: B8 and B4, where the prep runs alone); the scan sweep at d 64.
# Build here: BUILD_DIR=build-device-cc tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (cc/: cuda_op_parity, cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cc] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/cc
timeout 200 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i fail $OUT/parity.txt | head -5
for sc in old 4 5; do
  case $sc in old) E="HYDRA_GDN_PREP_WARPS=8 HYDRA_GDN_SCAN_LATE_ISSUE=0"; X="";; *) E="HYDRA_X=1"; X="--scan $sc";; esac
  env $E timeout 120 $B/cuda_op_parity --only gdn $X > $OUT/p.txt 2>&1
  echo "parity gdn $sc rc $?: $(tail -n 1 $OUT/p.txt)"; grep -i fail $OUT/p.txt | head -3
  { echo "== $sc"; cat $OUT/p.txt; } >> $OUT/parity_gdn.txt
done
rm -f $OUT/p.txt
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 4x8192x16x128 --shape 8x4096x16x128 --shape 8x4096x9x64"
for rep in 1 2; do
  for mode in new p8 p4all; do
    [ $mode = p4all ] && [ $rep = 2 ] && continue
    case $mode in new) E="HYDRA_X=1"; S="$SH";; p8) E="HYDRA_GDN_PREP_WARPS=8"; S="$SH";;
      p4all) E="HYDRA_GDN_PREP_WARPS=4"; S="--shape 4x8192x16x128 --shape 8x4096x16x128";; esac
    env $E timeout 200 $B/cuda_gdn_attention_bench --gdn-only $S > /tmp/r.jsonl 2> /tmp/r.err
    echo "rc $? $mode rep $rep"
    sed "s/^{/{\"mode\": \"$mode\", \"rep\": $rep, /" /tmp/r.jsonl >> $OUT/bench.jsonl
    { echo "== $mode rep $rep"; cat /tmp/r.err; } >> $OUT/bench.err
  done
done
st bench
timeout 100 $B/cuda_gdn_attention_bench --gdn-only --scan-sweep --shape 8x4096x9x64 > $OUT/sweep.jsonl 2> $OUT/sweep.err
echo "sweep rc $?"; grep '_scan"' $OUT/sweep.jsonl | cut -c1-150
python3 - $OUT/bench.jsonl <<'PY'
import json,sys,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l); d[(r['op'],r['B'],r['T'],r['H'],r['D'],r['mode'])].append(r['ms'])
for k in sorted({k[:5] for k in d}):
    print('%-13s B%d T%d H%d D%d ' % k + '  '.join('%s %s' % (m, ' '.join('%.4f' % x for x in d.get(k + (m,), []))) for m in ('new', 'p8', 'p4all')))
PY
st done
