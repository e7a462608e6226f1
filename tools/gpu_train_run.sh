#!/usr/bin/env bash
# GPU training on the offline GPU machine, in the two calls the default model needs (tools/gpu_build.sh
# explains the split: the 94 MiB GGUF goes over as two parts, part a with the first call).
#
# here, once:  tools/gpu_build.sh fetch (.devdeps/gpu, gguf_1, gguf_2, ...); optionally tools/gpu_train_run.sh pack
#   (.devdeps/gpu_train/bin.tar.xz: hydra, the GPU tests and the benchmarks from build-cuda-train2, configured with
#   -DHYDRA_CUDA=ON -DHYDRA_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3, so no build is needed there)
# here, before the calls: tools/gpu_train_run.sh split (.devdeps/gguf_train_{a,b}: the model split for the
#   tree as it is now, 3 MiB margin)
# call 1, carry .devdeps/gpu .devdeps/gguf_train_a .peer [.devdeps/gpu_train]:   tools/gpu_train_run.sh bench
#   the carried binaries when they load there, else build hydra, hydra_gpu_tests and the benchmarks there
#   (tools/gpu_build.sh build); keep part a of the model for call 2;
#   gradient parity (hydra_gpu_tests' GpuTrainStep cases: tiny models + SmolLM2-135M shapes, random weights,
#   and the engine) vs the CPU reference;
#   training-step throughput of SmolLM2-135M and its 7:1 hybrid (8x2048, 4x4096, the distillation step,
#   T = 32K batch 1 with / without layer recomputation), then the PyTorch eager reference of the same
#   models at the same shapes (tools/torch_hybrid_ref.py; fla from .peer for the GDN heads)
#   (tools/gpu_train_run.sh stage: only the binaries and part a, when call 1's measurements already exist)
# (tools/gpu_train_run.sh model: only the model assembly of call 2, for other scripts such as gpu_pipeline_run.sh)
# call 2 (within ~30 s), carry .devdeps/gguf_train_b:    tools/gpu_train_run.sh distill
#   the model; parity on the real teacher and its 7:1 random-kv conversion (the smollm2_real_* GpuTrainStep
#   cases); `hydra convert`; a stage-2 KL
#   distillation of the hybrid against the teacher on the prose cache through `hydra distill --device
#   cuda`, sized from call 1's measured step time (or DISTILL_STEP_MS) to run DISTILL_SECONDS (default
#   320; SKIP_PARITY=1 leaves the real-model parity out)
# Results go to $OUT (or ./gpu_train_results): logs, JSON lines, the run's log.jsonl and loss_curve.png.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
RES="${OUT:-$ROOT/gpu_train_results}"
mkdir -p "$RES"
export PYTHONUNBUFFERED=1
mode="${1:-}"
t_start=$(date +%s)
stamp() { echo "[gpu_train_run] $(( $(date +%s) - t_start )) s: $*"; }
PROGRAMS=(hydra hydra_gpu_tests gpu_train_bench gpu_decode_bench)
# the GPU test cases of the training step (random-weight models; the real model's: REAL_PARITY)
PARITY='Cases/GpuTrainStep.Parity/tiny_*:Cases/GpuTrainStep.Parity/smollm2_shape_*:GpuTrainEngine.*'
REAL_PARITY='Cases/GpuTrainStep.Parity/smollm2_real_*'
# the lines of a gtest run worth showing: each test's verdict and the totals
verdicts() { grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^\[  (PASSED|FAILED)  \]|suites? ran' "$1" | tail -"${2:-40}"; }
PACKED="$ROOT/.devdeps/gpu_train/bin.tar.xz"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # as tools/gpu_build.sh
PART_A="$ROOT/.devdeps/gguf_train_a/part" PART_B="$ROOT/.devdeps/gguf_train_b/part"

unxz_to() {  # unxz_to OUT < in.xz   (xz, else Python's lzma), as tools/gpu_build.sh
  if command -v xz >/dev/null; then xz -dc > "$1"
  else python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.decompress(sys.stdin.buffer.read()))' > "$1"; fi
}
untar_xz() {  # untar_xz FILE DIR
  mkdir -p "$2"
  unxz_to "$2/.tmp.tar" < "$1"
  tar -C "$2" -xf "$2/.tmp.tar"
  rm "$2/.tmp.tar"
}

# The carried binaries with tools/gpu_build.sh's sysroot, data and env.sh; fails (-> build there) when any
# of them does not load.
use_prebuilt() {
  [[ -f "$PACKED" && -f "$ROOT/.devdeps/gpu/sysroot.tar.xz" && -f "$ROOT/.devdeps/gpu/data.tar.xz" ]] || return 1
  local SYS="$PREFIX/sysroot" ARCH=x86_64-linux-gnu cublas
  untar_xz "$ROOT/.devdeps/gpu/sysroot.tar.xz" "$PREFIX"
  untar_xz "$ROOT/.devdeps/gpu/data.tar.xz" "$PREFIX"
  mkdir -p "$PREFIX/cache" && ln -sfn "$PREFIX/data/prose" "$PREFIX/cache/prose"
  cublas="$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)"
  [[ -n "$cublas" ]] || return 1
  {
    echo "export PATH=\"$PREFIX/build:\$PATH\""
    echo "export LD_LIBRARY_PATH=\"$SYS/usr/lib/$ARCH:$SYS/usr/lib/$ARCH/openblas-openmp:$(dirname "$cublas")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "export HYDRA_CACHE=\"$PREFIX/cache\" HYDRA_WORDNET_DIR=\"$PREFIX/data/wordnet\" HYDRA_DICT=\"$PREFIX/data/words\""
    echo "export HYDRA_MODEL=\"$PREFIX/models/SmolLM2-135M-Instruct.Q4_1.gguf\""
    # cuDNN (ops/cuda/cudnn_attention, loaded at run time) from PyTorch's wheel, when there is one
    echo "_cudnn=\$(\"$ROOT/tools/cudnn_lib_dir.sh\"); [ -n \"\$_cudnn\" ] && export LD_LIBRARY_PATH=\"\$_cudnn:\$LD_LIBRARY_PATH\" || true"
  } > "$PREFIX/env.sh"
  mkdir -p "$PREFIX/build"
  untar_xz "$PACKED" "$PREFIX/build"
  (
    # shellcheck disable=SC1091
    source "$PREFIX/env.sh"
    for p in "${PROGRAMS[@]}"; do
      [[ -x "$PREFIX/build/$p" ]] || exit 1
      if ldd "$PREFIX/build/$p" | grep -q "not found"; then ldd "$PREFIX/build/$p" | grep "not found"; exit 1; fi
    done
    "$PREFIX/build/hydra" --help > /dev/null
  )
}

# The GGUF on this machine from part a (kept by call 1) and part b (carried now), checked by sha256; skipped when
# it is already there and intact.
assemble_model() {
  local gguf="$PREFIX/models/$GGUF_NAME"
  echo "$GGUF_SHA256  $gguf" | sha256sum -c --quiet - > /dev/null 2>&1 && return 0
  [[ -f "$PREFIX/gguf_parts/train_a" && -f "$PART_B" && -x "$PREFIX/build/hydra" ]] || {
    echo "[gpu_train_run] part a, part b or the binaries are missing: run call 1 again, then call 2 at once"; return 1; }
  mkdir -p "$PREFIX/models"
  cat "$PREFIX/gguf_parts/train_a" "$PART_B" | unxz_to "$gguf"
  echo "$GGUF_SHA256  $gguf" | sha256sum -c --quiet - || { echo "[gpu_train_run] model checksum mismatch"; return 1; }
}

case "$mode" in
split)  # here: the xz'd GGUF (tools/gpu_build.sh fetch) split for these calls, with room for the tree to grow
  xzm="$ROOT/.devdeps/model.gguf.xz"
  tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
  size=$(stat -c %s "$xzm")
  b=$(( 64 * 1024 * 1024 - tree - ${MARGIN_MIB:-3} * 1024 * 1024 ))
  a=$(( size - b ))
  mkdir -p "$(dirname "$PART_A")" "$(dirname "$PART_B")"
  head -c "$a" "$xzm" > "$PART_A"
  tail -c +"$((a + 1))" "$xzm" > "$PART_B"
  echo "tree $tree bytes; part a $a, part b $b (call 2 carries $(( tree + b )) of $(( 64 * 1024 * 1024 )))"
  ;;
pack)  # here: the binaries of a portable CUDA build into .devdeps/gpu_train/bin.tar.xz
  BUILD="${BUILD_DIR:-$ROOT/build-cuda-train2}"
  mkdir -p "$(dirname "$PACKED")"
  tar -C "$BUILD" -cf - "${PROGRAMS[@]}" | xz -T"${JOBS:-2}" -9 > "$PACKED"
  ls -la "$PACKED"
  ;;
stage)  # call 1 without the measurements: the binaries (or a build) and part a of the model only
  if use_prebuilt > "$RES/build.log" 2>&1; then
    stamp "carried binaries load: no build"
  else
    HYDRA_GPU_TARGETS="${PROGRAMS[*]}" tools/gpu_build.sh build >> "$RES/build.log" 2>&1 || { tail -40 "$RES/build.log"; exit 3; }
  fi
  mkdir -p "$PREFIX/gguf_parts" && cp "$PART_A" "$PREFIX/gguf_parts/train_a" && stamp "part a kept"
  ;;
bench)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$RES/gpu.txt" 2>&1
  nproc >> "$RES/gpu.txt"
  if use_prebuilt > "$RES/build.log" 2>&1; then
    stamp "carried binaries load: no build"
  else
    stamp "building there"
    HYDRA_GPU_TARGETS="${PROGRAMS[*]}" tools/gpu_build.sh build >> "$RES/build.log" 2>&1 \
      || { tail -40 "$RES/build.log"; echo "[gpu_train_run] build failed"; exit 3; }
  fi
  tail -1 "$RES/build.log"
  mkdir -p "$PREFIX/gguf_parts" && cp "$PART_A" "$PREFIX/gguf_parts/train_a"  # the model's first part, for call 2
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  B="$PREFIX/build"
  stamp "parity"
  timeout 240 "$B/hydra_gpu_tests" --gtest_filter="$PARITY" > "$RES/parity.log" 2>&1
  prc=$?
  echo "parity exit $prc" >> "$RES/parity.log"
  verdicts "$RES/parity.log" 60
  stamp "ours"
  timeout 150 "$B/gpu_train_bench" --plan-out "$RES/plan.json" --json "$RES/ours.jsonl" > "$RES/ours.log" 2>&1
  cat "$RES/ours.log"
  cp "$RES/ours.jsonl" "$PREFIX/ours.jsonl" 2>/dev/null
  stamp "pytorch"
  FLA_PATH="$ROOT/.peer" timeout 180 python3 tools/torch_hybrid_ref.py --plan "$RES/plan.json" \
    --json "$RES/torch.jsonl" > "$RES/torch.log" 2>&1
  grep -v Warning "$RES/torch.log" | tail -12
  stamp "done"
  exit "$prc"
  ;;
model)  # call 2 alone: the model from part a (kept by call 1) and the carried part b, checksummed; a no-op when there
  assemble_model || exit 3
  ;;
distill)
  assemble_model || exit 3
  # shellcheck disable=SC1091
  source "$PREFIX/env.sh"
  B="$PREFIX/build"
  stamp "parity on the real model${SKIP_PARITY:+ (skipped)}"
  [[ -n "${SKIP_PARITY:-}" ]] || timeout 120 "$B/hydra_gpu_tests" --gtest_filter="$REAL_PARITY" > "$RES/parity_model.log" 2>&1
  echo "parity exit $?" >> "$RES/parity_model.log"
  verdicts "$RES/parity_model.log" 20
  stamp "convert"
  rm -rf /tmp/hybrid71 /tmp/distill71
  hydra convert "$HYDRA_MODEL" --ratio 7:1 --select random --seed 1 --granularity kv \
    --calib "$HYDRA_CACHE/prose/austen_emma.txt" --out /tmp/hybrid71 > "$RES/convert.log" 2>&1 \
    || { tail -20 "$RES/convert.log"; exit 4; }
  tail -3 "$RES/convert.log"
  secs="${DISTILL_SECONDS:-320}"
  steps=$(python3 - "$PREFIX/ours.jsonl" "$secs" "${DISTILL_STEP_MS:-}" <<'EOF'
import json, math, sys
ms = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else 250.0
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r.get("model") == "hybrid-7:1 distill" and "step_ms" in r and not sys.argv[3]:
            ms = float(r["step_ms"])
except OSError:
    pass
print(max(50, math.ceil(float(sys.argv[2]) * 1000.0 / (ms * 1.04))))
EOF
)
  stamp "distill: $steps steps of 8 x 2048 (~${secs} s at call 1's step time)"
  timeout -s TERM $(( secs + 100 )) hydra distill --device cuda stage.kind=distill stage.init=/tmp/hybrid71 \
    "stage.teacher=$HYDRA_MODEL" "data.tokenizer=$HYDRA_MODEL" data.seq_len=2048 data.batch_size=8 \
    loss.ce_weight=0 loss.kl_weight=1 stage.mixer_lr_scale=3 optim.lr=1e-4 optim.warmup_steps=20 \
    "optim.schedule_steps=$steps" "run.steps=$steps" run.save_every=1000000 "run.eval_every=$(( (steps + 3) / 4 ))" \
    run.eval_batches=4 --out /tmp/distill71 > "$RES/distill.log" 2>&1
  drc=$?
  stamp "distill exit $drc"
  tail -5 "$RES/distill.log"
  cp /tmp/distill71/log.jsonl /tmp/distill71/loss_curve.png "$RES/" 2>/dev/null
  python3 - "$RES/log.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = sorted(r["tokens_per_s"] for r in rows[2:])
print(f"{len(rows)} steps; first loss {rows[0].get('loss')}, last {rows[-1].get('loss')}; "
      f"median {tps[len(tps)//2]:.0f} tok/s; held-out {[(r['step'], round(r['heldout_loss'], 4)) for r in rows if 'heldout_loss' in r]}")
EOF
  exit "$drc"
  ;;
*)
  sed -n '2,24p' "$0"
  exit 2
  ;;
esac
