#!/usr/bin/env bash
# scripts/coverage.sh: line coverage of port/ by the Check suites and the fuzzers' corpora
# (`make coverage', which builds what it runs; see test/coverage.mk).
#
# Runs $COV_DIR/check_kprof (its main.c suite runs $COV_DIR/kprof_sink) and each fuzzer's
# coverage build over its corpus once (-runs=0), merges the profiles and prints, per C
# file of port/, the lines covered by Check, by the fuzzers and by both. Fails when the
# Check suites fail, or when a file's combined line coverage is under COV_MIN percent.
set -uo pipefail

COV_DIR=${COV_DIR:-_build/cov}
FUZZ_DIR=${FUZZ_DIR:-_build/fuzz}
COV_MIN=${COV_MIN:-70}
TARGETS="fuzz_sink fuzz_decode fuzz_ring fuzz_writers fuzz_record fuzz_sample"
llvm=$(command -v llvm-profdata-14 > /dev/null && echo -14 || echo "")
PROFDATA=llvm-profdata$llvm
LLVMCOV=llvm-cov$llvm

rm -f "$COV_DIR"/*.profraw "$COV_DIR"/*.profdata
start=$(date +%s)

# Check, and the sink program its main.c suite starts (a profile per process).
if ! CK_FORK=no LLVM_PROFILE_FILE="$COV_DIR/check-%p.profraw" KPROF_SINK="$COV_DIR/kprof_sink" \
     KPROF_TEST_DATA=test/data "$COV_DIR/check_kprof" > "$COV_DIR/check.log" 2>&1; then
  tail -20 "$COV_DIR/check.log" >&2
  echo "coverage: the Check suites failed (log: $COV_DIR/check.log)" >&2
  exit 1
fi

# The fuzzers' corpora, seeded when a run of fuzz/run.sh has not made them.
[ -d "$FUZZ_DIR/corpus-writers" ] || FUZZ_DIR=$FUZZ_DIR fuzz/run.sh seed > /dev/null
for t in $TARGETS; do
  corpus=$FUZZ_DIR/corpus-${t#fuzz_}
  LLVM_PROFILE_FILE="$COV_DIR/$t.profraw" KPROF_FUZZ_LAX_ECHO=1 \
    "$FUZZ_DIR/cov/$t" -runs=0 "$corpus" > "$COV_DIR/$t.log" 2>&1 ||
    { echo "coverage: $t failed on its corpus (log: $COV_DIR/$t.log)" >&2; exit 1; }
done

"$PROFDATA" merge -sparse "$COV_DIR"/check-*.profraw -o "$COV_DIR/check.profdata"
"$PROFDATA" merge -sparse "$COV_DIR"/fuzz_*.profraw -o "$COV_DIR/fuzz.profdata"
"$PROFDATA" merge -sparse "$COV_DIR"/*.profraw -o "$COV_DIR/all.profdata"
objects=("$COV_DIR/check_kprof" -object "$COV_DIR/kprof_sink")
for t in $TARGETS; do
  objects+=(-object "$FUZZ_DIR/cov/$t")
done
sources=(port/*.c port/*/*.c)

# file -> line coverage (the report's 10th column), for one profile.
lines() {
  "$LLVMCOV" report "${objects[@]}" -instr-profile="$COV_DIR/$1.profdata" "${sources[@]}" \
    2> "$COV_DIR/$1.report.err" | awk 'NF == 13 && $1 ~ /\.c$/ { print $1, $10 }'
}
lines check > "$COV_DIR/check.lines"
lines fuzz > "$COV_DIR/fuzz.lines"
lines all > "$COV_DIR/all.lines"

echo "coverage: lines of port/ covered (Check, fuzzers' corpora, both; at least $COV_MIN% each):"
printf '  %-28s %8s %8s %8s\n' file check fuzzers both
awk -v min="$COV_MIN" '
  FILENAME ~ /check.lines$/ { check[$1] = $2; next }
  FILENAME ~ /fuzz.lines$/ { fuzz[$1] = $2; next }
  { both = $2; sub(/%/, "", both)
    flag = (both + 0 < min) ? "  UNDER " min "%" : ""
    if (flag != "") bad++
    printf "  %-28s %8s %8s %8s%s\n", $1, check[$1], fuzz[$1], $2, flag; n++ }
  END { if (n == 0) { print "coverage: no report (see the .report.err files)"; exit 1 }
        exit bad > 0 }' "$COV_DIR/check.lines" "$COV_DIR/fuzz.lines" "$COV_DIR/all.lines"
rc=$?
echo "coverage: $(wc -l < "$COV_DIR/all.lines") files, $(( $(date +%s) - start )) s"
exit $rc
