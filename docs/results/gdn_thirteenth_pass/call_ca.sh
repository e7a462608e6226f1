#!/usr/bin/env bash
# call CA: main's tip (82bc19b, only compile-checked last session) plus the 16-warp prep
# (HYDRA_GDN_PREP_WARPS=8 gives the tip's prep). Parity: the whole program (16-warp prep where it streams),
# gdn with the 8-warp prep everywhere, gdn with the 16-warp prep everywhere; then the forward and
# forward+backward, 16-warp default against 8 warps, alternating twice.
# Build here: BUILD_DIR=build-device-p16 tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (p16/: cuda_op_parity, cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_ca] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/p16
timeout 200 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(tail -n 1 $OUT/parity.txt)"
grep -i fail $OUT/parity.txt | head -5
for w in 8 16; do
  HYDRA_GDN_PREP_WARPS=$w timeout 120 $B/cuda_op_parity --only gdn > $OUT/p.txt 2>&1
  echo "parity gdn prep $w warps rc $?: $(tail -n 1 $OUT/p.txt)"; grep -i fail $OUT/p.txt | head -3
  { echo "== prep warps $w"; cat $OUT/p.txt; } >> $OUT/parity_gdn.txt
done
rm -f $OUT/p.txt
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 4x8192x16x128 --shape 8x4096x16x128 --shape 8x4096x9x64"
for rep in 1 2; do
  for mode in p16 p8; do
    case $mode in p16) E="HYDRA_X=1";; p8) E="HYDRA_GDN_PREP_WARPS=8";; esac
    env $E timeout 200 $B/cuda_gdn_attention_bench --gdn-only $SH > /tmp/r.jsonl 2> /tmp/r.err
    echo "rc $? $mode rep $rep"
    sed "s/^{/{\"mode\": \"$mode\", \"rep\": $rep, /" /tmp/r.jsonl >> $OUT/bench.jsonl
    { echo "== $mode rep $rep"; cat /tmp/r.err; } >> $OUT/bench.err
  done
done
st bench
grep -E "^== |^B[0-9]|prep [0-9]+ warps|variant" $OUT/bench.err | uniq > $OUT/configs.txt
python3 - $OUT/bench.jsonl <<'PY'
import json,sys,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l); d[(r['op'],r['B'],r['T'],r['H'],r['D'],r['mode'])].append(r['ms'])
for k in sorted({k[:5] for k in d}):
    print('%-13s B%d T%d H%d D%d ' % k + '  '.join('%s %s' % (m, ' '.join('%.4f' % x for x in d.get(k + (m,), []))) for m in ('p16', 'p8')))
PY
head -40 $OUT/configs.txt
st done
