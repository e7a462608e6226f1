#!/usr/bin/env bash
# Builds the libFuzzer targets (every fuzz/*.cpp) with clang + ASan/UBSan and runs one of them.
# Usage: tools/fuzz.sh TARGET [SECONDS] [extra libFuzzer args...]
#   e.g. tools/fuzz.sh fuzz_gguf 600
# Corpus: a scratch directory /tmp/corpus_<name> (grows as coverage is found; not committed), plus
# the committed seeds in fuzz/seeds/<name without "fuzz_">/ when present. Crash inputs land in
# ./crash-* (libFuzzer's default); reproduce with: build-fuzz/TARGET crash-<hash>.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:?usage: tools/fuzz.sh TARGET [SECONDS] [libFuzzer args...]}"
seconds="${2:-60}"
shift $(( $# >= 2 ? 2 : 1 ))
build="${HYDRA_FUZZ_BUILD:-$root/build-fuzz}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DHYDRA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"${HYDRA_JOBS:-2}" --target "$target"

corpus="/tmp/corpus_${target#fuzz_}"
mkdir -p "$corpus"
seeds="$root/fuzz/seeds/${target#fuzz_}"
dirs=("$corpus")
[ -d "$seeds" ] && dirs+=("$seeds")
exec "$build/$target" -max_total_time="$seconds" -rss_limit_mb="${HYDRA_FUZZ_RSS_MB:-2048}" "$@" "${dirs[@]}"
