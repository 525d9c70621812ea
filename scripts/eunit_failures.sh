#!/bin/sh
# The EUnit failures of a log, one line each: the test (module: name), where it
# failed and the error's first line. For the end of make test, whose last lines
# are all a CI excerpt may show.
#   scripts/eunit_failures.sh LOG [PREFIX]
log=$1
prefix=${2:-}
[ -f "$log" ] || exit 0
awk -v prefix="$prefix" '
  function flush() {
    if (pending != "") {
      line = prefix pending (where != "" ? " @ " where : "") (err != "" ? ": " err : "")
      print substr(line, 1, 400); n++
    }
    pending = ""; where = ""; err = ""; seek = 0; inerr = 0
  }
  # The last test line seen: "  module: name (description)..."; a generated
  # test is named by its fun (-name_test_/0-fun-1-).
  match($0, /[a-z_0-9]+_tests: [-a-zA-Z_0-9\/$]+( \([^)]*\))?/) { last = substr($0, RSTART, RLENGTH) }
  /\*failed\*|\*timed out\*/ {
    flush()
    pending = (last != "" ? last : "?") (index($0, "timed out") ? " TIMED OUT" : " FAILED")
    seek = 1; next
  }
  seek && where == "" && /^in function / { where = $3 " " $NF; sub(/\)$/, "", where); next }
  # The error, its lines joined, up to its output or a blank line.
  seek && inerr && (/^  output:/ || /^$/) { flush(); next }
  seek && inerr { t = $0; gsub(/^ +/, "", t); err = err t; next }
  seek && err == "" && /^\*\*/ { err = $0; inerr = 1; next }
  seek && /\.\.\.(\[[0-9.]+ s\] )?ok$/ { flush() }
  END { flush(); if (n == 0) exit 1 }
' "$log"
