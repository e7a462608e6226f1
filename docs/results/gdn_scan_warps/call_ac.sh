#!/usr/bin/env bash
# call AC: per-instruction stall sampling (Nsight Compute source page) of the forward scan (variant 4:
# 16-row slices, 8 warps) and the per-chunk backward, B8 T4096 H16 d128
set -uo pipefail
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null
t0=$(date +%s); st() { echo "[call_ac] $(( $(date +%s) - t0 )) s: $*"; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo "ncu: $NCU"; $NCU --version | tail -1
SEC="--section WarpStateStats --section SourceCounters --section SchedulerStats --section SpeedOfLight"
HYDRA_GDN_SCAN=4 timeout 150 $NCU --clock-control none -k regex:"gdn_fwd_scan" -c 1 $SEC -o /tmp/scan build-device/cuda_gdn_attention_bench --quick --gdn-only > /tmp/scan.log 2>&1; echo "rc $?"; tail -3 /tmp/scan.log
st "scan profiled"
timeout 150 $NCU --clock-control none -k regex:"gdn_bwd_chunk" -c 1 $SEC -o /tmp/bchunk build-device/cuda_gdn_attention_bench --quick --gdn-only > /tmp/bchunk.log 2>&1; echo "rc $?"; tail -3 /tmp/bchunk.log
st "bchunk profiled"
for r in scan bchunk; do
  $NCU --import /tmp/$r.ncu-rep --page details --print-details all > $OUT/${r}_details.txt 2>&1
  $NCU --import /tmp/$r.ncu-rep --page source --csv --print-source sass > $OUT/${r}_sass.csv 2>$OUT/${r}_sass.err; echo "$r source rc $? $(wc -l < $OUT/${r}_sass.csv) lines"; head -c 600 $OUT/${r}_sass.csv; echo; head -3 $OUT/${r}_sass.err
done
gzip -9 $OUT/*_sass.csv; ls -la $OUT
st done
