# Sourced by the CLI test scripts: named checks that count failures, and text matching.
#   check NAME COMMAND...   runs COMMAND; prints "ok   NAME" or "FAIL NAME" (and counts the failure)
#   contains FILE TEXT      FILE holds TEXT (fixed string)
# A script ends with `exit $((fails > 0))`.
fails=0
check() {
  local name="$1"; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
contains() { grep -qF -- "$2" "$1"; }
