#!/usr/bin/env bash
# Builds the CUDA op-parity and benchmark programs with nvcc and g++ alone, for a GPU machine that has
# the CUDA toolkit but none of hydra_lib's Debian dependencies and no package registry:
#   - the CUDA kernels (src/ops/cuda/*.cu),
#   - the CPU reference sources the parity programs compare against (ops/cpu attention, gdn_recurrence,
#     l2norm, linear; train losses, adamw; core/error), with a loop GEMM (bench/cuda_gemm_shim.cc) in place
#     of OpenBLAS,
#   - fmt used header-only, from the system or from Debian's libfmt-dev unpacked into .devdeps/, and
#     nlohmann-json's headers the same way (train/adamw.h includes json_fwd.hpp; nothing of it is linked).
# No CMake, OpenBLAS, PCRE2, CLI11 or toml++ needed. OpenMP comes with g++; cuBLAS with the CUDA toolkit.
#
# Usage:
#   tools/device_build.sh --fetch   where apt works: download libfmt-dev and nlohmann-json3-dev into
#                                   .devdeps/ and unpack them
#                                   (.devdeps/ is git-ignored; carry it to the GPU machine)
#   tools/device_build.sh           build into ${BUILD_DIR:-build-device}/ (here or on the GPU machine);
#                                   NVEXTRA adds nvcc flags (NVEXTRA=-lineinfo for per-line profiles)
# The outputs run on either machine (x86-64-v3 host code, static CUDA runtime, sm_90 device code).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS="$ROOT/.devdeps"
OUTDIR="${BUILD_DIR:-$ROOT/build-device}"
JOBS="${JOBS:-$(nproc)}"

if [[ "${1:-}" == "--fetch" ]]; then
  mkdir -p "$DEPS/debs" "$DEPS/root"
  (cd "$DEPS/debs" && apt-get download libfmt-dev nlohmann-json3-dev)
  for f in "$DEPS"/debs/*.deb; do dpkg -x "$f" "$DEPS/root"; done
  echo "[device_build] fmt and nlohmann-json headers in $DEPS/root/usr/include"
  exit 0
fi

if [[ -f "$DEPS/root/usr/include/fmt/format.h" ]]; then
  FMT_INC="$DEPS/root/usr/include"
elif [[ -f /usr/include/fmt/format.h ]]; then
  FMT_INC=/usr/include
else
  echo "[device_build] fmt headers missing: run tools/device_build.sh --fetch where apt works and carry .devdeps/" >&2
  exit 1
fi
command -v nvcc >/dev/null || { echo "[device_build] nvcc not on PATH" >&2; exit 1; }
# nlohmann/json_fwd.hpp: train/adamw.h (the AdamW reference of cuda_train_ops_parity) includes it
JSON_INC="$FMT_INC"
[[ -f "$JSON_INC/nlohmann/json_fwd.hpp" ]] || JSON_INC="$DEPS/root/usr/include"
[[ -f "$JSON_INC/nlohmann/json_fwd.hpp" ]] || {
  echo "[device_build] nlohmann-json headers missing: run tools/device_build.sh --fetch where apt works" >&2; exit 1; }

mkdir -p "$OUTDIR/obj"
# /usr/include is searched already; naming it with -isystem reorders the system directories and breaks the
# C++ headers' #include_next <math.h>
DEP_INC=()
for d in "$FMT_INC" "$JSON_INC"; do [[ "$d" == /usr/include ]] || DEP_INC+=(-isystem "$d"); done
CXXFLAGS=(-O3 -std=c++20 -march=x86-64-v3 -fopenmp -DFMT_HEADER_ONLY -I"$ROOT/src" "${DEP_INC[@]}")
NVFLAGS=(-O3 -std=c++17 --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -DFMT_HEADER_ONLY
         -I"$ROOT/src" "${DEP_INC[@]}" -Xcompiler -fopenmp,-march=x86-64-v3)
# NVEXTRA: more nvcc flags, e.g. NVEXTRA=-lineinfo for Nsight Compute's per-source-line counters
read -r -a NV_EXTRA <<< "${NVEXTRA:-}"
NVFLAGS+=("${NV_EXTRA[@]}")

CPP_SRCS=(src/core/error.cpp src/ops/cpu/attention.cpp src/ops/cpu/gdn_recurrence.cpp src/ops/cpu/l2norm.cpp
          src/ops/cpu/embedding.cpp src/ops/cpu/rmsnorm.cpp src/ops/cpu/rope.cpp src/ops/cpu/swiglu.cpp
          src/ops/cpu/short_conv.cpp src/ops/cpu/gdn_gates.cpp src/ops/cpu/gated_rmsnorm.cpp src/model/fusion.cpp
          src/ops/cpu/linear.cpp src/train/losses.cpp src/train/adamw.cpp
          bench/cuda_gemm_shim.cc)
CU_SRCS=(src/ops/cuda/gdn_chunk.cu src/ops/cuda/attention.cu src/ops/cuda/cudnn_attention.cu bench/cuda_op_parity.cu
         src/ops/cuda/elementwise.cu src/ops/cuda/embedding.cu src/ops/cuda/rmsnorm.cu src/ops/cuda/rope.cu
         src/ops/cuda/swiglu.cu src/ops/cuda/short_conv.cu src/ops/cuda/gdn_gates.cu src/ops/cuda/gated_rmsnorm.cu
         src/ops/cuda/fusion.cu bench/cuda_op_parity_layers.cu
         src/ops/cuda/device_arena.cu src/ops/cuda/gemm.cu src/ops/cuda/losses.cu src/ops/cuda/adamw.cu
         bench/cuda_train_ops_parity.cu
         bench/cuda_gdn_attention_bench.cu)

pids=()
running=0
newest_header=$(cd "$ROOT" && ls -t src/ops/cuda/*.h src/ops/cuda/*.cuh src/ops/cpu/*.h src/core/*.h src/train/*.h | head -1)
compile() {  # src -> obj, at most JOBS at once; skipped when the object is newer than it and every header
  local src="$1" obj="$OUTDIR/obj/$(echo "$1" | tr '/' '_').o"
  if [[ -f "$obj" && "$obj" -nt "$ROOT/$src" && "$obj" -nt "$ROOT/$newest_header" ]]; then return 0; fi
  if [[ "$src" == *.cu ]]; then
    nvcc "${NVFLAGS[@]}" -c "$ROOT/$src" -o "$obj" &
  else
    g++ "${CXXFLAGS[@]}" -c "$ROOT/$src" -o "$obj" &
  fi
  pids+=($!)
  running=$((running + 1))
  if (( running >= JOBS )); then wait -n; running=$((running - 1)); fi
}
start=$(date +%s)
for s in "${CU_SRCS[@]}" "${CPP_SRCS[@]}"; do compile "$s"; done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
(( fail == 0 )) || { echo "[device_build] compile failed" >&2; exit 1; }
O="$OUTDIR/obj"
KERNELS=("$O/src_ops_cuda_gdn_chunk.cu.o" "$O/src_ops_cuda_attention.cu.o" "$O/src_ops_cuda_cudnn_attention.cu.o")
CPUREF=("$O/src_core_error.cpp.o" "$O/src_ops_cpu_attention.cpp.o" "$O/src_ops_cpu_gdn_recurrence.cpp.o"
        "$O/src_ops_cpu_l2norm.cpp.o" "$O/bench_cuda_gemm_shim.cc.o")
nvcc -o "$OUTDIR/cuda_op_parity" "$O/bench_cuda_op_parity.cu.o" "${KERNELS[@]}" "${CPUREF[@]}" -lgomp -ldl
nvcc -o "$OUTDIR/cuda_gdn_attention_bench" "$O/bench_cuda_gdn_attention_bench.cu.o" "${KERNELS[@]}" \
  "$O/src_core_error.cpp.o" -ldl
# element-wise / normalisation layer ops vs their CPU references (model/fusion.h needs nlohmann-json headers)
LAYER_KERNELS=()
for k in elementwise embedding rmsnorm rope swiglu short_conv gdn_gates gated_rmsnorm fusion; do
  LAYER_KERNELS+=("$O/src_ops_cuda_$k.cu.o")
done
LAYER_CPUREF=("$O/src_core_error.cpp.o" "$O/src_model_fusion.cpp.o")
for k in embedding rmsnorm rope swiglu short_conv gdn_gates gated_rmsnorm; do
  LAYER_CPUREF+=("$O/src_ops_cpu_$k.cpp.o")
done
nvcc -o "$OUTDIR/cuda_op_parity_layers" "$O/bench_cuda_op_parity_layers.cu.o" "${LAYER_KERNELS[@]}" \
  "${LAYER_CPUREF[@]}" -lgomp
TRAIN_KERNELS=("$O/src_ops_cuda_device_arena.cu.o" "$O/src_ops_cuda_gemm.cu.o" "$O/src_ops_cuda_losses.cu.o"
               "$O/src_ops_cuda_adamw.cu.o")
nvcc -o "$OUTDIR/cuda_train_ops_parity" "$O/bench_cuda_train_ops_parity.cu.o" "${TRAIN_KERNELS[@]}" \
  "$O/src_core_error.cpp.o" "$O/src_ops_cpu_linear.cpp.o" "$O/src_train_losses.cpp.o" "$O/src_train_adamw.cpp.o" \
  "$O/bench_cuda_gemm_shim.cc.o" -lcublas -lcublasLt -lgomp
# what the outputs were built from, so a later run can tell whether they are current
(cd "$ROOT" && cat "${CPP_SRCS[@]}" "${CU_SRCS[@]}" src/ops/cuda/*.h src/ops/cuda/*.cuh src/ops/cpu/*.h \
  src/core/error.h src/core/gemm.h src/train/*.h | sha256sum | cut -d' ' -f1) > "$OUTDIR/.stamp"
echo "[device_build] built $OUTDIR/cuda_op_parity, cuda_gdn_attention_bench and cuda_train_ops_parity in $(( $(date +%s) - start )) s"
