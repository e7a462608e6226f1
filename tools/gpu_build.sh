#!/usr/bin/env bash
# The whole `hydra` binary built with CUDA, and the default model, on the offline GPU machine: it has the
# CUDA toolkit (nvcc, cuBLAS), CMake, ninja and g++, but none of our Debian dependencies, no package
# registry, no network, and a call carries at most 64 MiB (working tree included) while the model
# alone is 94 MiB.
#
# Here (Debian 12, apt works):
#   tools/gpu_build.sh fetch   into .devdeps/ (git-ignored):
#     gpu/sysroot.tar.xz  the -dev and runtime packages of OpenBLAS (+ gfortran, quadmath), fmt, PCRE2, zlib, zstd,
#                         CLI11, nlohmann-json, toml++, stb, pkgconf, GoogleTest, PLplot and cpp-httplib (apt-get download,
#                         dpkg -x, docs and static archives dropped except GoogleTest's)
#     gpu/data.tar.xz     eval data: the prose cache, WordNet's index.{noun,verb,adj}, the wamerican list
#     gguf_1/, gguf_2/, ...  (tools/gpu_build.sh split redoes only this, for the tree as it is) the default GGUF, xz -1 compressed and split so that call 1 carries the
#                         sysroot, the data and part 1, and each later call one more part (each call also
#                         carries the working tree; CARRY_RESERVE=BYTES leaves room per call for more)
#   tools/gpu_build.sh pack    (optional) hydra (HYDRA_GPU_TARGETS) built here for any x86-64-v3 CPU and sm_90, into
#                         gpu/bin.tar.xz with the hash of the sources it came from; `build` there uses it instead of
#                         building when the carried sources hash the same and it loads (then split again)
# There, calls in a row (a machine stays warm ~30 s after a call and keeps /tmp and ignored files):
#   call 1, carry .devdeps/gpu .devdeps/gguf_1:  tools/gpu_build.sh build && tools/gpu_build.sh stash
#       -> /tmp/hydra_gpu/{sysroot,data,build/hydra,build/hydra_gpu_tests,env.sh}, part 1 kept
#       (tools/gpu_test.sh runs the GPU test suite on top of this build)
#   call i, carry .devdeps/gguf_i:               tools/gpu_build.sh stash   (each middle part)
#   last call, carry the last part:              tools/gpu_build.sh model
#       -> /tmp/hydra_gpu/models/SmolLM2-135M-Instruct.Q4_1.gguf (sha256 checked); exit 3 when a part or
#          the build did not survive (the machine went cold: start again with call 1)
#   source /tmp/hydra_gpu/env.sh: PATH, LD_LIBRARY_PATH, HYDRA_CACHE, HYDRA_WORDNET_DIR, HYDRA_DICT,
#   HYDRA_MODEL (the GGUF).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS="$ROOT/.devdeps"
PREFIX="${HYDRA_GPU_PREFIX:-/tmp/hydra_gpu}"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # as tools/setup.sh
CARRY_LIMIT=$((64 * 1024 * 1024))
# PLplot: only what building and linking need; its cairo driver (fonts, pango, X libraries) is left out, so on the
# GPU machine figures are skipped with a warning naming the package.
PACKAGES=(libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libgfortran5 libquadmath0 libfmt-dev libfmt9
  nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtomlplusplus3 libpcre2-dev libpcre2-8-0 libstb-dev
  pkgconf pkgconf-bin libpkgconf3 libgtest-dev
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libbrotli-dev
  libplplot-dev libplplot17 libltdl7 libshp2 libcsirocsa0 libcsironn0 libqhull-r8.0 libqsastime0 libfreetype6 libpng16-16
  libbrotli1
  zlib1g-dev zlib1g libzstd-dev libzstd1)
ARCH=x86_64-linux-gnu
mode="${1:-}"

unxz_to() {  # unxz_to OUT < in.xz   (xz, else Python's lzma)
  if command -v xz >/dev/null; then xz -dc > "$1"
  else python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.decompress(sys.stdin.buffer.read()))' > "$1"; fi
}
untar_xz() {  # untar_xz FILE DIR
  mkdir -p "$2"
  unxz_to "$2/.tmp.tar" < "$1"
  tar -C "$2" -xf "$2/.tmp.tar"
  rm "$2/.tmp.tar"
}

# What the carried binaries were built from: every source, test and build file that travels with a call.
sources_hash() {
  (cd "$ROOT" && find src tests/gpu CMakeLists.txt -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
}

case "$mode" in
fetch)
  rm -rf "$DEPS/gpu"
  mkdir -p "$DEPS/gpu" "$DEPS/debs_gpu"
  (cd "$DEPS/debs_gpu" && apt-get download "${PACKAGES[@]}")
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  for f in "$DEPS"/debs_gpu/*.deb; do dpkg -x "$f" "$stage/sysroot"; done
  # GoogleTest comes as static archives only: kept (the GPU tests link them)
  find "$stage/sysroot" \( \( -name '*.a' ! -name 'libgtest*' \) -o -name 'liblapack*' -o -name 'libblas*' \) \
    -exec rm -f {} +
  rm -rf "$stage/sysroot/usr/share/doc" "$stage/sysroot/usr/share/man"
  tar -C "$stage" -cf - sysroot | xz -T"${JOBS:-2}" -6 > "$DEPS/gpu/sysroot.tar.xz"
  mkdir -p "$stage/data/prose" "$stage/data/wordnet"
  cp "$ROOT"/.cache/prose/*.txt "$ROOT/.cache/prose/manifest.json" "$stage/data/prose/"
  cp /usr/share/wordnet/index.noun /usr/share/wordnet/index.verb /usr/share/wordnet/index.adj "$stage/data/wordnet/"
  cp -L /usr/share/dict/words "$stage/data/words"
  tar -C "$stage" -cf - data | xz -T"${JOBS:-2}" -6 > "$DEPS/gpu/data.tar.xz"
  "$0" split
  du -sh "$DEPS/gpu"/*
  ;;
split)  # only the model split, for the working tree as it is now
  model="$ROOT/.cache/models/$GGUF_NAME"
  [[ -f "$model" ]] || { echo "[gpu_build] $model missing: run tools/setup.sh --no-build" >&2; exit 1; }
  xzm="$DEPS/model.gguf.xz"  # kept: compressing takes minutes on a busy 2-core machine
  [[ -f "$xzm" && "$xzm" -nt "$model" ]] || xz -T"${JOBS:-2}" -1 -c "$model" > "$xzm"
  # the working tree travels with every call (tracked + untracked-not-ignored files), plus 1 MiB margin;
  # CARRY_RESERVE bytes per call are left free for other payloads (a peer's binaries)
  tree=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
  size=$(stat -c %s "$xzm")
  gpu=$(du -cb "$DEPS/gpu" | tail -1 | cut -f1)
  room=$((CARRY_LIMIT - tree - 1024 * 1024 - ${CARRY_RESERVE:-0}))
  first=$((room - gpu))
  (( first > 0 && room > 0 )) || { echo "[gpu_build] does not fit: tree $tree + gpu $gpu bytes" >&2; exit 1; }
  rm -rf "$DEPS"/gguf_[0-9]*
  n=1 off=0 take=$first
  while (( off < size )); do
    mkdir -p "$DEPS/gguf_$n"
    dd if="$xzm" of="$DEPS/gguf_$n/part" iflag=skip_bytes,count_bytes skip="$off" count="$take" bs=1M status=none
    off=$((off + take)); take=$room; n=$((n + 1))
  done
  parts=$((n - 1))
  for i in $(seq 1 "$parts"); do echo "$parts" > "$DEPS/gguf_$i/of"; done
  echo "[gpu_build] the model travels in $parts parts: call 1 carries .devdeps/gpu .devdeps/gguf_1, call i .devdeps/gguf_i"
  du -sh "$DEPS"/gguf_[0-9]*/part
  ;;
pack)  # here: the targets built portable (x86-64-v3, sm_90) into .devdeps/gpu/bin.tar.xz, with the sources' hash
  B="${BUILD_DIR:-$ROOT/build-cuda-port}"
  targets="${HYDRA_GPU_TARGETS:-hydra}"
  cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYDRA_CUDA=ON -DHYDRA_TESTS=ON -DHYDRA_NATIVE=OFF \
    -DCMAKE_CXX_FLAGS=-march=x86-64-v3 >/dev/null
  # shellcheck disable=SC2086
  nice ninja -C "$B" $targets
  # shellcheck disable=SC2086
  tar -C "$B" -cf - $targets | xz -T"${JOBS:-2}" -6 > "$DEPS/gpu/bin.tar.xz"
  sources_hash > "$DEPS/gpu/bin.sources"
  echo "[gpu_build] packed $targets: $(du -h "$DEPS/gpu/bin.tar.xz" | cut -f1); run tools/gpu_build.sh split again (call 1 carries them)"
  ;;
build)
  for f in sysroot.tar.xz data.tar.xz; do
    [[ -f "$DEPS/gpu/$f" ]] || { echo "[gpu_build] .devdeps/gpu/$f missing: tools/gpu_build.sh fetch, carry .devdeps/gpu" >&2; exit 1; }
  done
  start=$(date +%s)
  mkdir -p "$PREFIX"
  untar_xz "$DEPS/gpu/sysroot.tar.xz" "$PREFIX"
  untar_xz "$DEPS/gpu/data.tar.xz" "$PREFIX"
  mkdir -p "$PREFIX/cache" && ln -sfn "$PREFIX/data/prose" "$PREFIX/cache/prose"
  SYS="$PREFIX/sysroot"
  LIBS="$SYS/usr/lib/$ARCH:$SYS/usr/lib/$ARCH/openblas-openmp"
  cublas="$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)"
  [[ -n "$cublas" ]] || { echo "[gpu_build] libcublas.so.13 not found on this machine" >&2; exit 1; }
  cat > "$PREFIX/env.sh" <<EOF
export PATH="$PREFIX/build:\$PATH"
export LD_LIBRARY_PATH="$LIBS:$(dirname "$cublas")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HYDRA_CACHE="$PREFIX/cache" HYDRA_WORDNET_DIR="$PREFIX/data/wordnet" HYDRA_DICT="$PREFIX/data/words"
export HYDRA_MODEL="$PREFIX/models/$GGUF_NAME"
# cuDNN (ops/cuda/cudnn_attention, loaded at run time) from PyTorch's wheel, when there is one
_cudnn=\$("$ROOT/tools/cudnn_lib_dir.sh"); [ -n "\$_cudnn" ] && export LD_LIBRARY_PATH="\$_cudnn:\$LD_LIBRARY_PATH" || true
EOF
  targets="${HYDRA_GPU_TARGETS:-hydra hydra_gpu_tests}"  # e.g. the benchmarks (tools/gpu_train_run.sh)
  # Binaries packed here (tools/gpu_build.sh pack) from these very sources save the build (minutes of device
  # time): used when every target is in the archive and loads; else the build below.
  if [[ -f "$DEPS/gpu/bin.tar.xz" && "$(cat "$DEPS/gpu/bin.sources" 2>/dev/null)" == "$(sources_hash)" ]]; then
    mkdir -p "$PREFIX/build" && untar_xz "$DEPS/gpu/bin.tar.xz" "$PREFIX/build"
    if (
      # shellcheck disable=SC1091
      source "$PREFIX/env.sh"
      for t in $targets; do
        [[ -x "$PREFIX/build/$t" ]] && ! ldd "$PREFIX/build/$t" | grep -q "not found" || exit 1
      done
      "$PREFIX/build/hydra" --help >/dev/null
    ); then
      echo "[gpu_build] carried binaries ($targets) load: no build ($(( $(date +%s) - start )) s)"
      exit 0
    fi
    echo "[gpu_build] carried binaries do not cover $targets or do not load: building"
  fi
  export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # pkgconf, and the linker's indirect deps
  export PKG_CONFIG_PATH="$SYS/usr/lib/$ARCH/pkgconfig:$SYS/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$SYS"
  export PKG_CONFIG_LIBDIR="$PKG_CONFIG_PATH"
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  # nvcc at C++17: with the image's g++ 13 library, nvcc's C++20 mode rejects fmt's consteval format strings
  cmake -S "$ROOT" -B "$PREFIX/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYDRA_CUDA=ON -DHYDRA_TESTS=ON \
    -DHYDRA_CUDA_STD=c++17 \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DPKG_CONFIG_EXECUTABLE="$SYS/usr/bin/pkgconf" \
    -DCMAKE_PREFIX_PATH="$SYS/usr" -Dfmt_DIR="$SYS/usr/lib/$ARCH/cmake/fmt" \
    -Dnlohmann_json_DIR="$SYS/usr/share/cmake/nlohmann_json" -DCLI11_DIR="$SYS/usr/share/cmake/CLI11" \
    -Dtomlplusplus_DIR="$SYS/usr/lib/$ARCH/cmake/tomlplusplus" -DGTest_DIR="$SYS/usr/lib/$ARCH/cmake/GTest" \
    -DOPENBLAS_INCLUDE="$SYS/usr/include/$ARCH/openblas-openmp" \
    -DOPENBLAS_LIB="$SYS/usr/lib/$ARCH/openblas-openmp/libopenblas.so" \
    -DCMAKE_CXX_FLAGS="-isystem $SYS/usr/include" -DCMAKE_CUDA_FLAGS="-isystem=$SYS/usr/include" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$SYS/usr/lib/$ARCH:$SYS/usr/lib/$ARCH/openblas-openmp" >/dev/null
  ninja -C "$PREFIX/build" -j"$(nproc)" $targets
  echo "[gpu_build] built $targets in $PREFIX/build in $(( $(date +%s) - start )) s"
  ;;
stash)
  # every model part this call carries is kept for the calls after it
  mkdir -p "$PREFIX/gguf_parts"
  for d in "$DEPS"/gguf_[0-9]*; do [[ -f "$d/part" ]] && cp "$d/part" "$PREFIX/gguf_parts/${d##*_}" && cp "$d/of" "$PREFIX/gguf_parts/of"; done
  echo "[gpu_build] kept model parts: $(ls "$PREFIX/gguf_parts" | grep -vx of | tr '\n' ' ')of $(cat "$PREFIX/gguf_parts/of" 2>/dev/null)"
  ;;
model)
  "$0" stash >/dev/null
  of=$(cat "$PREFIX/gguf_parts/of" 2>/dev/null || echo 0)
  missing=""
  for i in $(seq 1 "$of"); do [[ -f "$PREFIX/gguf_parts/$i" ]] || missing="$missing $i"; done
  # the parts say how many there are; none kept at all means a machine that went cold (or never had call 1)
  [[ "$of" -gt 0 && -z "$missing" ]] || {
    echo "[gpu_build] model parts missing (${missing:- all} of ${of}): the machine went cold or a call was skipped; start again with call 1" >&2
    exit 3; }
  mkdir -p "$PREFIX/models"
  for i in $(seq 1 "$of"); do cat "$PREFIX/gguf_parts/$i"; done | unxz_to "$PREFIX/models/$GGUF_NAME"
  echo "$GGUF_SHA256  $PREFIX/models/$GGUF_NAME" | sha256sum -c --quiet - \
    || { echo "[gpu_build] checksum mismatch for the reassembled $GGUF_NAME" >&2; exit 1; }
  echo "[gpu_build] model: $PREFIX/models/$GGUF_NAME"
  ;;
*)
  sed -n '2,28p' "$0"
  exit 2
  ;;
esac
