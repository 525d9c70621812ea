#!/usr/bin/env bash
# fuzz/run.sh: runs the libFuzzer targets (called by `make fuzz-run` / `make fuzz-regress`,
# which build them first into $FUZZ_DIR).
#
#   fuzz/run.sh run        seed the corpora, fuzz each target FUZZ_SECONDS/4 seconds
#   fuzz/run.sh regress    every file of fuzz/regress/ through every target, once; then each
#                          OTP's trace messages and ring records (fuzz/otp/, one folder per OTP) through the
#                          decoders, as fuzz_sink, fuzz_decode and fuzz_ring inputs
#   fuzz/run.sh seed       (re)make the seed corpora only (scripts/coverage.sh, when missing)
#
# Exit status: non-zero when any target crashed (the input is in $FUZZ_DIR/<target>-crash-*).
set -uo pipefail

FUZZ_DIR=${FUZZ_DIR:-_build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
TARGETS="fuzz_sink fuzz_decode fuzz_ring fuzz_writers fuzz_record fuzz_sample"
COMMON=(-max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

mkdir -p "$FUZZ_DIR"

seed() {
  local streams=() s
  # The VM recordings of test/data and each OTP's (fuzz/otp/, make fuzz-otp-corpus).
  for s in test/data/*.bin fuzz/otp/*/trace-*.bin; do
    [ -s "$s" ] && streams+=("$s")
  done
  # A short recording of the bench workload (running, procs, return_to...), made once.
  if [ ! -s "$FUZZ_DIR/gen-seed.bin" ]; then
    ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript bench/gen_stream.erl --messages 2000 \
      "$FUZZ_DIR/gen-seed.bin" > /dev/null || echo "fuzz: no gen_stream seed (continuing)" >&2
  fi
  [ -s "$FUZZ_DIR/gen-seed.bin" ] && streams+=("$FUZZ_DIR/gen-seed.bin")
  if [ ${#streams[@]} -eq 0 ]; then
    echo "fuzz: no recorded stream to seed from (test/data/*.bin)" >&2
  fi
  ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript fuzz/mkcorpus.escript \
    "$FUZZ_DIR/corpus-sink" "$FUZZ_DIR/corpus-decode" "${streams[@]}" &&
    ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript fuzz/mkring.escript "$FUZZ_DIR/corpus-ring" &&
    for f in fuzz/otp/*/ring-*; do
      [ -f "$f" ] && cp "$f" "$FUZZ_DIR/corpus-ring/otp$(basename "$(dirname "$f")")-$(basename "$f")"
    done &&
    ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript fuzz/mkwriters.escript "$FUZZ_DIR/corpus-writers" &&
    mkdir -p "$FUZZ_DIR/corpus-record" &&
    # Recorded captures, each behind a 0 byte (fuzz_record: the rest is a whole file).
    for f in fuzz/regress/record-*; do
      cp "$f" "$FUZZ_DIR/corpus-record/"
    done &&
    # Recorded sampling sessions: whole, their records, their map text.
    ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript fuzz/mksample.escript "$FUZZ_DIR/corpus-sample" \
      test/data/sample_*.ksr
}

corpus_of() {
  case $1 in
    fuzz_sink) echo "$FUZZ_DIR/corpus-sink" ;;
    fuzz_ring) echo "$FUZZ_DIR/corpus-ring" ;;
    fuzz_writers) echo "$FUZZ_DIR/corpus-writers" ;;
    fuzz_record) echo "$FUZZ_DIR/corpus-record" ;;
    fuzz_sample) echo "$FUZZ_DIR/corpus-sample" ;;
    *) echo "$FUZZ_DIR/corpus-decode" ;;
  esac
}

run() {
  local per=$((FUZZ_SECONDS / $(wc -w <<< "$TARGETS"))) t rc=0 log summary=""
  [ "$per" -lt 1 ] && per=1
  touch "$FUZZ_DIR/.run-start"
  seed || return 1
  for t in $TARGETS; do
    log=$FUZZ_DIR/$t.log
    echo "fuzz: $t for $per s (log: $log)"
    "$FUZZ_DIR/$t" "${COMMON[@]}" -max_total_time="$per" -dict=fuzz/dict \
      -artifact_prefix="$FUZZ_DIR/$t-" "$(corpus_of "$t")" > "$log" 2>&1
    local r=$?
    local done_line execs speed
    done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    summary+=$(printf '\n  %-12s %s: %s execs, %s exec/s; %s' "$t" \
      "$([ $r -eq 0 ] && echo ok || echo CRASHED)" "${execs:-?}" "${speed:-?}" \
      "$(sed -E 's/^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+//; s/[[:space:]]+(lim|exec\/s|rss|L|MS):.*//' <<< "$done_line")")
    if [ $r -ne 0 ]; then
      rc=1
      grep -E 'ERROR|SUMMARY|fuzz_(sink|decode|ring|writers|record|sample):|runtime error|Test unit written' "$log" | head -20 >&2
    fi
  done
  echo "fuzz: summary (libFuzzer's cov = edges covered, ft = features):$summary"
  find "$FUZZ_DIR" -maxdepth 1 \( -name '*-crash-*' -o -name '*-leak-*' -o -name '*-timeout-*' \) \
    -newer "$FUZZ_DIR/.run-start" | sed 's/^/fuzz: new crash input: /'
  return $rc
}

regress() {
  local files=() f t rc=0
  for f in fuzz/regress/*; do
    [ -f "$f" ] && files+=("$f")
  done
  if [ ${#files[@]} -eq 0 ]; then
    echo "fuzz: fuzz/regress/ is empty"
    return 0
  fi
  for t in $TARGETS; do
    regress_one "$t" "regression inputs" "${files[@]}" || rc=1
  done
  otp_regress || rc=1
  return $rc
}

# regress_one TARGET WHAT INPUT...: each input once through TARGET.
regress_one() {
  local t=$1 what=$2
  shift 2
  if "$FUZZ_DIR/$t" "${COMMON[@]}" "$@" > "$FUZZ_DIR/$t-regress.log" 2>&1; then
    echo "fuzz: $t: $# $what pass"
  else
    echo "fuzz: $t: FAILED on one of the $what (log: $FUZZ_DIR/$t-regress.log)" >&2
    grep -E 'Running:|ERROR|SUMMARY|fuzz_(sink|decode|ring|writers|record|sample):|runtime error' "$FUZZ_DIR/$t-regress.log" | tail -8 >&2
    return 1
  fi
}

# Each OTP's recorded trace messages (as fuzz_sink and fuzz_decode inputs, made by
# mkcorpus from them alone) and ring records (fuzz_ring), once: what each OTP writes
# goes through the decoders under ASan and UBSan at every make test.
otp_regress() {
  local streams=() rings=() sink=$FUZZ_DIR/otp-regress-sink decode=$FUZZ_DIR/otp-regress-decode rc=0 f
  for f in fuzz/otp/*/trace-*.bin; do [ -s "$f" ] && streams+=("$f"); done
  for f in fuzz/otp/*/ring-*; do [ -s "$f" ] && rings+=("$f"); done
  [ ${#streams[@]} -gt 0 ] || { echo "fuzz: no OTP recordings in fuzz/otp/ (make fuzz-otp-corpus)"; return 0; }
  rm -rf "$sink" "$decode" && mkdir -p "$sink" "$decode"
  ERL_CRASH_DUMP=$FUZZ_DIR/erl_crash.dump escript fuzz/mkcorpus.escript "$sink" "$decode" "${streams[@]}" \
    > /dev/null || return 1
  regress_one fuzz_sink "inputs of $(ls -d fuzz/otp/*/ | wc -l) OTPs' trace messages" "$sink"/* || rc=1
  regress_one fuzz_decode "frames of $(ls -d fuzz/otp/*/ | wc -l) OTPs' trace messages" "$decode"/* || rc=1
  [ ${#rings[@]} -gt 0 ] && { regress_one fuzz_ring "OTPs' ring records" "${rings[@]}" || rc=1; }
  return $rc
}

# Line coverage of port/ by each corpus, with the -fprofile-instr-generate builds in cov/.
cov() {
  local t prof=() llvm
  llvm=$(command -v llvm-profdata-14 > /dev/null && echo -14 || echo "")
  for t in $TARGETS; do
    LLVM_PROFILE_FILE="$FUZZ_DIR/cov/$t.profraw" KPROF_FUZZ_LAX_ECHO=1 \
      "$FUZZ_DIR/cov/$t" -runs=0 "$(corpus_of "$t")" > "$FUZZ_DIR/cov/$t.log" 2>&1
    "llvm-profdata$llvm" merge -sparse "$FUZZ_DIR/cov/$t.profraw" -o "$FUZZ_DIR/cov/$t.profdata"
    echo "fuzz: $t, line coverage of port/ by $(ls "$(corpus_of "$t")" | wc -l) corpus inputs:"
    "llvm-cov$llvm" report "$FUZZ_DIR/cov/$t" -instr-profile="$FUZZ_DIR/cov/$t.profdata" \
      port/*/*.c | awk '{ print "  " $0 }'
  done
}

case ${1:-run} in
  seed) seed ;;
  run) run ;;
  regress) regress ;;
  cov) cov ;;
  *) echo "usage: fuzz/run.sh seed|run|regress|cov" >&2; exit 2 ;;
esac
