#!/bin/sh
# scripts/test_counts.sh KIND LOG: "PASSED FAILED SKIPPED" of one suite's log,
# nothing when the log has no count (the suite did not get to run its tests).
#   check  Check's "NN%: Checks: N, Failures: F, Errors: E" lines (summed)
#   eunit  EUnit's "All N tests passed." or "Failed: F.  Skipped: S.  Passed:
#          P." (a cancelled group counts as one more failure), or rebar3
#          eunit's "N tests, F failures[, S skipped][, C cancelled]"
#   mix    ExUnit's "N tests, F failures[, S skipped]", or from Elixir 1.20
#          "Result: P passed[, F failed][, S skipped]"
kind=${1:-}
log=${2:-}
[ -f "$log" ] || exit 0
case $kind in
  check)
    sed -n 's/.*Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\).*/\1 \2 \3/p' "$log" |
      awk '{ c += $1; f += $2 + $3 } END { if (NR) print c - f, f, 0 }' ;;
  eunit|mix)
    # (rebar3 colours its summary even into a file.)
    sed 's/\x1b\[[0-9;]*m//g' "$log" | awk '
      /All [0-9]+ tests passed/ { p = $2; f = 0; s = 0 }
      /Failed: [0-9]+\.  Skipped: [0-9]+\.  Passed: [0-9]+/ {
        gsub(/\./, ""); f = $2; s = $4; p = $6 }
      /One or more tests were cancelled/ { c = 1 }
      /^[0-9]+ tests?, [0-9]+ failures?/ {
        n = $1; f = $3; s = 0; c = 0
        for (i = 4; i <= NF; i++) {
          if ($(i) ~ /^skipped/) s = $(i - 1)
          if ($(i) ~ /^cancelled/) c = $(i - 1)
        }
        gsub(/,/, "", f); gsub(/,/, "", s); gsub(/,/, "", c)
        p = n - f - s - c; f = f + c; c = 0 }
      /^Result: [0-9]+ / {
        p = 0; f = 0; s = 0; c = 0
        for (i = 2; i < NF; i++) {
          w = $(i + 1); gsub(/,/, "", w)
          if (w == "passed") p = $(i)
          if (w == "failed" || w == "invalid") f += $(i)
          if (w == "skipped" || w == "excluded") s += $(i)
        } }
      END { if (p != "") print p, f + c, s + 0 }' ;;
  *) echo "usage: $0 check|eunit|mix LOG" >&2; exit 64 ;;
esac
