#!/usr/bin/env bash
# call BL: the forward scan with cluster copies (cluster_copy.cuh: W, Q, K, P rows multicast to the head's
# slice blocks). Parity of gdn with the automatic scan and with scans 3, 4 and 5 forced (the clustered
# variants), then forward / forward+backward times with clusters on and off (HYDRA_GDN_SCAN_CLUSTER=0),
# alternating, at the shapes where the forward target is open, and the scan alone (HYDRA_GDN_PARTS=1).
# Build here: BUILD_DIR=build-device-mc tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-device-mc
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bl] $(( $(date +%s) - t0 )) s: $*"; }
B=build-device-mc
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
for sc in "" 4 5 3; do
  if [ -z "$sc" ]; then timeout 200 $B/cuda_op_parity --only gdn > $OUT/parity_auto.txt 2>&1; else
    timeout 200 $B/cuda_op_parity --only gdn --scan $sc > $OUT/parity_scan$sc.txt 2>&1; fi
  echo "parity scan '${sc}' rc $?: $(tail -1 $OUT/parity_${sc:+scan}${sc:-auto}.txt)"
done
grep -h -i "fail" $OUT/parity_*.txt | head -5
st parity
SH="--shape 1x65536x16x128 --shape 2x16384x16x128 --shape 4x8192x16x128 --shape 8x4096x16x128 --shape 8x4096x9x64"
for rep in 1 2; do
  for c in 1 0; do
    HYDRA_GDN_SCAN_CLUSTER=$c timeout 200 $B/cuda_gdn_attention_bench --gdn-only $SH > /tmp/r.jsonl 2> /tmp/r.err
    echo "rc $? cluster=$c rep $rep"
    sed "s/^{/{\"cluster\": $c, \"rep\": $rep, /" /tmp/r.jsonl >> $OUT/bench.jsonl
    { echo "== cluster=$c rep $rep"; cat /tmp/r.err; } >> $OUT/bench.err
  done
done
st bench
for c in 1 0; do
  HYDRA_GDN_PARTS=1 HYDRA_GDN_SCAN_CLUSTER=$c timeout 100 $B/cuda_gdn_attention_bench --gdn-only --shape 1x65536x16x128 --shape 2x16384x16x128 2>&1 >/dev/null | grep -E "forward:|variant|^B" | sed "s/^/alone cluster=$c: /"
done | tee $OUT/alone.txt
python3 - $OUT/bench.jsonl <<'PY'
import json,sys,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    r=json.loads(l); d[(r['op'],r['B'],r['T'],r['H'],r['D'],r['cluster'])].append(r['ms'])
keys=sorted({k[:5] for k in d})
for k in keys:
    on=d.get(k+(1,),[]); off=d.get(k+(0,),[])
    print('%-12s B%d T%d H%d D%d  clusters %s  plain %s' % (k[0],*k[1:], ' '.join('%.4f'%x for x in on), ' '.join('%.4f'%x for x in off)))
PY
grep -E "variant" $OUT/bench.err | sort | uniq -c | head
st done
