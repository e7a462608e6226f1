#!/usr/bin/env bash
# call CB: two switches on the streamed forward: a 4-warp prep (HYDRA_GDN_PREP_WARPS=4; call CA's 16-warp
# prep lost) and, in the tile-copy scans, the block's own next-chunk copies issued by the Q-row warps after
# phase A (HYDRA_GDN_SCAN_LATE_ISSUE=1). Parity of gdn with both on (automatic; scans 4 and 5 forced), then
# the forward and forward+backward at B1, B2 and d 64 in four modes, alternating twice.
# Build here: BUILD_DIR=build-device-cb tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (cb/: cuda_op_parity, cuda_gdn_attention_bench)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_cb] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/cb
for sc in auto 4 5; do
  case $sc in auto) X="";; *) X="--scan $sc";; esac
  HYDRA_GDN_PREP_WARPS=4 HYDRA_GDN_SCAN_LATE_ISSUE=1 timeout 120 $B/cuda_op_parity --only gdn $X > $OUT/p.txt 2>&1
  echo "parity $sc rc $?: $(tail -n 1 $OUT/p.txt)"; grep -i fail $OUT/p.txt | head -3
  { echo "== scan $sc"; cat $OUT/p.txt; } >> $OUT/parity_gdn.txt
done
rm -f $OUT/p.txt
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 8x4096x9x64"
for rep in 1 2; do
  for mode in base p4 late p4late; do
    case $mode in base) E="HYDRA_X=1";; p4) E="HYDRA_GDN_PREP_WARPS=4";; late) E="HYDRA_GDN_SCAN_LATE_ISSUE=1";;
      p4late) E="HYDRA_GDN_PREP_WARPS=4 HYDRA_GDN_SCAN_LATE_ISSUE=1";; esac
    env $E timeout 200 $B/cuda_gdn_attention_bench --gdn-only $SH > /tmp/r.jsonl 2> /tmp/r.err
    echo "rc $? $mode rep $rep"
    sed "s/^{/{\"mode\": \"$mode\", \"rep\": $rep, /" /tmp/r.jsonl >> $OUT/bench.jsonl
    { echo "== $mode rep $rep"; cat /tmp/r.err; } >> $OUT/bench.err
  done
done
st bench
python3 - $OUT/bench.jsonl <<'PY'
import json,sys,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l); d[(r['op'],r['B'],r['T'],r['H'],r['D'],r['mode'])].append(r['ms'])
for k in sorted({k[:5] for k in d}):
    print('%-13s B%d T%d H%d D%d ' % k + '  '.join('%s %s' % (m, ' '.join('%.4f' % x for x in d.get(k + (m,), []))) for m in ('base', 'p4', 'late', 'p4late')))
PY
grep -E "^== |^B[0-9]|prep [0-9]+ warps|variant" $OUT/bench.err | uniq | head -30
st done
