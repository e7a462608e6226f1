#!/usr/bin/env bash
# CLI checks of `hydra init` (run by CTest with the built hydra): a model directory made from a
# config.json alone has the parameter count of the real model of that config (the tiny transformers
# models under tests/data/tiny_hf), loads and generates; a broken config is refused naming the file;
# a foreign --out is kept unless --force.
#   tests/cli/init.sh path/to/hydra
set -uo pipefail
HYDRA="$(realpath "$1")"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
# shellcheck source=tests/cli/checks.sh
source "$(dirname "$0")/checks.sh"
params() { grep -m1 '^parameters' "$1" | awk '{print $2}'; }

for arch in llama qwen2 qwen3; do
  REF="$ROOT/tests/data/tiny_hf/$arch"
  "$HYDRA" init "$REF/config.json" --out "$W/$arch" --seed 5 >"$W/init_$arch" 2>&1; rc=$?
  check "$arch: init succeeds" test "$rc" -eq 0
  "$HYDRA" info "$W/$arch" >"$W/info_$arch" 2>&1
  "$HYDRA" info "$REF" >"$W/ref_$arch" 2>&1
  check "$arch: parameter count equals the real model's" test -n "$(params "$W/ref_$arch")" -a \
    "$(params "$W/info_$arch")" = "$(params "$W/ref_$arch")"
done

# same seed, same bytes; another seed, other bytes
"$HYDRA" init "$ROOT/tests/data/tiny_hf/qwen3/config.json" --out "$W/again" --seed 5 >/dev/null 2>&1
check "same seed gives the same weights" cmp -s "$W/qwen3/model.safetensors" "$W/again/model.safetensors"
"$HYDRA" init "$ROOT/tests/data/tiny_hf/qwen3/config.json" --out "$W/other" --seed 6 >/dev/null 2>&1
check "another seed gives other weights" test -f "$W/other/model.safetensors" -a \
  "$(cmp -s "$W/qwen3/model.safetensors" "$W/other/model.safetensors"; echo $?)" -ne 0

# a broken config is refused and names the file
sed 's/"num_attention_heads": *[0-9]*/"num_attention_heads": 0/' "$ROOT/tests/data/tiny_hf/qwen3/config.json" >"$W/bad.json"
"$HYDRA" init "$W/bad.json" --out "$W/bad" >"$W/o" 2>&1; rc=$?
check "a config with 0 heads is refused" test "$rc" -ne 0 -a ! -e "$W/bad/model.safetensors"
check "the refusal names the file" contains "$W/o" "bad.json"
echo "not json" >"$W/garbage.json"
"$HYDRA" init "$W/garbage.json" --out "$W/g" >"$W/o" 2>&1; rc=$?
check "a file that is not JSON is refused" test "$rc" -ne 0
check "that refusal names the file" contains "$W/o" "garbage.json"

# a foreign --out is kept unless --force
mkdir -p "$W/mine" && echo keep >"$W/mine/notes.txt"
"$HYDRA" init "$ROOT/tests/data/tiny_hf/llama/config.json" --out "$W/mine" >"$W/o" 2>&1; rc=$?
check "--out of other files is refused" test "$rc" -ne 0 -a "$(cat "$W/mine/notes.txt")" = keep
"$HYDRA" init "$ROOT/tests/data/tiny_hf/llama/config.json" --out "$W/mine" --force >"$W/o" 2>&1; rc=$?
check "--force replaces it" test "$rc" -eq 0 -a -f "$W/mine/model.safetensors" -a ! -e "$W/mine/notes.txt"
exit $((fails > 0))
