#!/usr/bin/env bash
# call BN: (1) the parity program with dg and dbeta at 2e-2 (kTolReduced in bench/cuda_op_parity.cu): the
# whole program on a fresh seed, and the two seeds whose T37 draws exceeded 1e-2 (dbeta in call O, dg in
# call BL). (2) Every scan variant forced in the streamed forward (--scan-sweep), at the shapes where the
# forward target is open (B2 and B1 at d 128, B8 H9 at d 64): the rule's choices there were measured before
# the forward streamed.
# Build here: BUILD_DIR=build-device-main3 tools/device_build.sh
# Carry: .devdeps/scripts (this file copied there) build-carry (main/: build-device-main3's binaries)
set -uo pipefail
t0=$(date +%s); st() { echo "[call_bn] $(( $(date +%s) - t0 )) s: $*"; }
B=build-carry/main
timeout 300 $B/cuda_op_parity > $OUT/parity.txt 2>&1; echo "parity rc $?: $(head -1 $OUT/parity.txt | cut -c1-60) ... $(tail -n 1 $OUT/parity.txt)"
timeout 100 $B/cuda_op_parity --only gdn --scan 3 --seed 1796198865985358165 > $OUT/parity_seed_bl.txt 2>&1; echo "seed BL rc $?: $(grep 'T37 H1 HV1 D128  *dg' $OUT/parity_seed_bl.txt | head -1) / $(tail -n 1 $OUT/parity_seed_bl.txt)"
timeout 100 $B/cuda_op_parity --only gdn --scan 0 --seed 1796144789136348116 > $OUT/parity_seed_o.txt 2>&1; echo "seed O rc $?: $(grep 'T37 H1 HV1 D128  *dbeta' $OUT/parity_seed_o.txt | head -1) / $(tail -n 1 $OUT/parity_seed_o.txt)"
st parity
timeout 400 $B/cuda_gdn_attention_bench --gdn-only --scan-sweep --shape 2x16384x16x128 --shape 1x65536x16x128 --shape 8x4096x9x64 > $OUT/sweep.jsonl 2> $OUT/sweep.err; echo "sweep rc $?"
grep -E "automatic scan" $OUT/sweep.err
grep '"gdn_fwd_scan"' $OUT/sweep.jsonl | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print('B%d T%d H%d D%d scan %d fwd %.4f' % (r['B'],r['T'],r['H'],r['D'],r['scan'],r['ms']))"
st done
