#!/usr/bin/env bash
# CUDA-graph decode (src/gpu/gpu_forward.h) checked and timed on the offline GPU machine, in one call
# (random weights) or two (the default model too). Figures: docs/BENCHMARKS.md, "Decode with CUDA graphs".
#
# here:  tools/gpu_decode_graphs_run.sh pack
#   hydra, hydra_gpu_tests and gpu_decode_bench of a CUDA build (BUILD_DIR, default build-cuda-graphs: -DHYDRA_CUDA=ON
#   -DHYDRA_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3) -> .devdeps/gpu_graphs/bin.tar.xz, and the xz'd
#   GGUF of tools/gpu_build.sh fetch split for these two calls -> .devdeps/gguf_graphs_{a,b}
# call 1, carry .devdeps/gpu .devdeps/gpu_graphs .devdeps/gguf_graphs_a:   tools/gpu_decode_graphs_run.sh synthetic
#   hydra_gpu_tests' GpuForward/Synthetic cases (7 random models: CPU reference, and graphs vs eager to 1e-5)
#   and its GpuForwardGraphs cases at SmolLM2-135M's shape, then gpu_decode_bench: decode ms/token eager vs
#   graphs at 1K/8K/32K positions for random weights at SmolLM2-135M's shape (teacher and 7:1 hybrid);
#   keeps part a of the model for call 2
# call 2 within 30 s, carry .devdeps/gguf_graphs_b:                        tools/gpu_decode_graphs_run.sh model
#   the default model (checksum): GpuForward.RealModel and GpuForwardGraphs.RealModelHybrid7to1 on it, decode
#   timing of it and its 7:1 conversion (gpu_decode_bench), and `hydra eval --device cuda` (EVAL_ARGS) with
#   HYDRA_CUDA_GRAPHS=0 and with graphs
# Logs go to $OUT (or ./gpu_graphs_results): results_<mode>.tar.gz (every log, eval JSON) and the main logs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_graphs}"
OUTDIR="${OUT:-$ROOT/gpu_graphs_results}"
mode="${1:-}"
RES="$PREFIX/logs_$mode"  # everything here; $OUTDIR gets one archive and the main logs (at most 8 files back)
mkdir -p "$RES" "$OUTDIR"
LENGTHS="${LENGTHS:-1024,8192,32768}"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # as tools/gpu_build.sh
PACKED="$ROOT/.devdeps/gpu_graphs/bin.tar.xz"
PART_A="$ROOT/.devdeps/gguf_graphs_a/part" PART_B="$ROOT/.devdeps/gguf_graphs_b/part"
t_start=$(date +%s)
unxz() {  # stdin -> stdout (xz, else Python's lzma: the GPU image may lack xz)
  if command -v xz > /dev/null; then xz -dc
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'; fi
}
stamp() { echo "[gpu_decode_graphs] $(( $(date +%s) - t_start )) s: $*"; }
finish() {  # finish STATUS KEY_LOG...
  local rc="$1"; shift
  tar -C "$RES" -czf "$OUTDIR/results_$mode.tar.gz" . 2>/dev/null
  for f in "$@"; do cp "$RES/$f" "$OUTDIR/" 2>/dev/null; done
  exit "$rc"
}

# The carried sysroot (tools/gpu_build.sh fetch), data and binaries under $PREFIX, and $PREFIX/env.sh.
setup() {
  mkdir -p "$PREFIX/bin" "$PREFIX/cache"
  unxz < "$ROOT/.devdeps/gpu/sysroot.tar.xz" | tar -C "$PREFIX" -xf - || return 1
  unxz < "$ROOT/.devdeps/gpu/data.tar.xz" | tar -C "$PREFIX" -xf - || return 1
  unxz < "$PACKED" | tar -C "$PREFIX/bin" -xf - || return 1
  ln -sfn "$PREFIX/data/prose" "$PREFIX/cache/prose"
  local lib="$PREFIX/sysroot/usr/lib/x86_64-linux-gnu" cublas
  cublas="$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)"
  cat > "$PREFIX/env.sh" <<ENV
export PATH="$PREFIX/bin:\$PATH"
export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp:$(dirname "$cublas")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HYDRA_CACHE="$PREFIX/cache" HYDRA_WORDNET_DIR="$PREFIX/data/wordnet" HYDRA_DICT="$PREFIX/data/words"
export HYDRA_MODEL="$PREFIX/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ENV
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  ldd "$PREFIX/bin/hydra_gpu_tests" "$PREFIX/bin/gpu_decode_bench" | grep "not found" && return 1
  return 0
}

case "$mode" in
pack)
  BUILD="${BUILD_DIR:-$ROOT/build-cuda-graphs}"
  mkdir -p "$(dirname "$PACKED")" "$(dirname "$PART_A")" "$(dirname "$PART_B")"
  tar -C "$BUILD" -cf - hydra hydra_gpu_tests gpu_decode_bench | xz -T2 -9 > "$PACKED"
  # call 2 carries the tree + part b, call 1 the tree + sysroot/data + binaries + part a: the slack is shared
  xzm="$ROOT/.devdeps/model.gguf.xz"
  tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
  one=$(( $(stat -c %s "$ROOT/.devdeps/gpu/sysroot.tar.xz") + $(stat -c %s "$ROOT/.devdeps/gpu/data.tar.xz") + $(stat -c %s "$PACKED") ))
  size=$(stat -c %s "$xzm") cap=$(( 64 * 1024 * 1024 ))
  slack=$(( 2 * cap - 2 * tree - one - size ))
  (( slack > 0 )) || { echo "the model does not fit into two calls (slack $slack bytes)"; exit 1; }
  b=$(( cap - tree - slack / 2 ))
  head -c $(( size - b )) "$xzm" > "$PART_A"
  tail -c +$(( size - b + 1 )) "$xzm" > "$PART_B"
  echo "tree $tree, call 1 carries $(( tree + one + size - b )), call 2 $(( tree + b )) of $cap bytes"
  ;;
synthetic)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$RES/gpu.txt" 2>&1
  setup > "$RES/setup.log" 2>&1 || { cat "$RES/setup.log"; finish 3 setup.log; }
  mkdir -p "$PREFIX/parts" && cp "$PART_A" "$PREFIX/parts/a" && stamp "set up; part a kept"
  timeout 100 hydra_gpu_tests --gtest_filter='GpuForward/Synthetic.*:GpuForwardGraphs.Smollm2Shape*' \
    > "$RES/parity_synthetic.log" 2>&1
  echo "exit $?" >> "$RES/parity_synthetic.log"
  grep -E "^(CUDA graphs|logits rel|GPU decode vs)|^\[ +(OK|FAILED|SKIPPED) +\]|suites? ran|exit" "$RES/parity_synthetic.log"
  stamp "timing, random weights at SmolLM2-135M's shape"
  timeout 150 gpu_decode_bench --lengths "$LENGTHS" > "$RES/timing_random.log" 2>&1
  trc=$?
  echo "exit $trc" >> "$RES/timing_random.log"
  grep -vE "^decode timing" "$RES/timing_random.log"
  stamp "done"
  finish "$trc" parity_synthetic.log timing_random.log
  ;;
model)
  gguf="$PREFIX/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [[ -f "$PREFIX/parts/a" && -f "$PREFIX/env.sh" ]] || { echo "part a / binaries missing: a fresh machine (call 1 again, then this within 30 s)"; exit 3; }
  mkdir -p "$PREFIX/models"
  cat "$PREFIX/parts/a" "$PART_B" | unxz > "$gguf"
  echo "$GGUF_SHA256  $gguf" | sha256sum -c --quiet - || { echo "model checksum mismatch"; exit 3; }
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  stamp "model ready; parity"
  timeout 120 hydra_gpu_tests --gtest_filter='GpuForward.RealModel:GpuForwardGraphs.RealModel*' \
    > "$RES/parity_model.log" 2>&1
  echo "exit $?" >> "$RES/parity_model.log"
  grep -E "^(CUDA graphs|logits rel|GPU decode vs|greedy)|^\[ +(OK|FAILED|SKIPPED) +\]|suites? ran|exit" "$RES/parity_model.log"
  stamp "timing, the model and its 7:1 conversion"
  timeout 150 gpu_decode_bench --lengths "$LENGTHS" "$HYDRA_MODEL" > "$RES/timing_model.log" 2>&1
  trc=$?
  echo "exit $trc" >> "$RES/timing_model.log"
  grep -vE "^decode timing" "$RES/timing_model.log"
  # shellcheck disable=SC2086
  for g in 0 1; do
    stamp "hydra eval, HYDRA_CUDA_GRAPHS=$g"
    HYDRA_CUDA_GRAPHS=$g timeout 120 hydra eval "$HYDRA_MODEL" --device cuda ${EVAL_ARGS:---suite all --lengths 1k,4k --samples 5} \
      --out "$RES/eval_graphs$g.json" > "$RES/eval_graphs$g.log" 2>&1
    echo "exit $?" >> "$RES/eval_graphs$g.log"
  done
  python3 - "$RES/eval_graphs0.json" "$RES/eval_graphs1.json" <<'PY' | tee "$RES/eval_summary.txt"
import json, sys
runs = []
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:
        print(f"{path}: {e}"); sys.exit(0)
    samples = [s for m in d["models"] for s in m["samples"]] if "models" in d else d["samples"]
    gen = sum(s["generated_tokens"] for s in samples)
    dec = sum(s["decode_s"] for s in samples)
    pre = sum(s["prefill_s"] for s in samples)
    runs.append(samples)
    print(f"{path}: {len(samples)} samples, prefill {pre:.2f} s, decode {dec:.2f} s for {gen} generated tokens = {1000 * dec / max(gen, 1):.3f} ms/token")
if len(runs) == 2:
    same = sum(a.get("output") == b.get("output") for a, b in zip(runs[0], runs[1]))
    print(f"identical outputs: {same} of {len(runs[0])} samples")
PY
  stamp "done"
  finish "$trc" parity_model.log timing_model.log eval_summary.txt
  ;;
*)
  sed -n '2,17p' "$0"
  exit 2
  ;;
esac
