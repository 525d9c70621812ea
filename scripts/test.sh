#!/bin/sh
# `make test`: every suite, one after the other; a summary at the end; non-zero if any failed.
#   C unit tests (Check), the same under ASan+UBSan, under valgrind, the Erlang
#   end-to-end tests (EUnit), the API docs (edoc, no warning, every export
#   documented), then the fuzzers for FUZZ_SECONDS (default 30).
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
passed=0
failed=0
failures=""

run() {
  name=$1
  shift
  echo "==> $name"
  start=$(date +%s)
  if "$@"; then
    passed=$((passed + 1))
    echo "<== $name: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    failures="$failures $name"
    echo "<== $name: FAILED ($(( $(date +%s) - start )) s)"
  fi
}

run check-c     $MAKE --no-print-directory check-c
run check-asan  $MAKE --no-print-directory check-asan
run check-mem   $MAKE --no-print-directory check-mem
run eunit       $MAKE --no-print-directory eunit
run docs        $MAKE --no-print-directory docs
run fuzz        $MAKE --no-print-directory fuzz-regress fuzz-run FUZZ_SECONDS="${FUZZ_SECONDS:-30}"

if [ -n "$failures" ]; then
  case "$failures" in
    *eunit*) echo "== the failing EUnit tests (full log: _build/eunit.log) =="
             grep -B1 -A14 '\*failed\*\|\*timed out\*' _build/eunit.log | head -120 ;;
  esac
  echo "failed:$failures"
fi
echo "make test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
