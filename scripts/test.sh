#!/bin/sh
# `make test`: every suite, one after the other; a summary at the end; non-zero if any failed.
#   C unit tests (Check), the same built with clang and with the POSIX fallbacks of
#   port/core/ks_platform.h, the sources compiled with musl, under ASan+UBSan, under valgrind, the Erlang
#   end-to-end tests (EUnit), the docs (edoc with no warning and every export
#   documented; every name the docs give exists, and the checker's own test; the docs'
#   shell sessions run, the shapes they print compared with the docs'),
#   the flame capture at 10 M events, every flame format in its own reader with
#   warnings on (callgrind_annotate; FlameGraph's scripts when FLAMEGRAPH_DIR or PATH
#   has them), the flame outputs in real viewers
#   (chromium; the callgrind file in KCachegrind under Xvfb), rebar3's xref, dialyzer and edoc, the Elixir example (mix), kprof taken as a
#   dependency the way a user takes it (rebar3, mix, a release, the hex file list, from a
#   file:// clone of HEAD, offline), then the fuzzers for FUZZ_SECONDS (default 30),
#   then the line coverage of port/ by Check and the fuzzers' corpora (each file at least 70 %);
#   then the same tree on OTP 27 and OTP 29 side by side, each in a Debian root (test/otp.mk: the build
#   with no warning, Check, EUnit by rebar3 eunit, the docs check, mix and rebar3 with that
#   system's Elixir and rebar3), whose roots are built (or refreshed) in the background
#   from the start (scripts/otp_root.sh). A line per OTP at the end: tests passed, failed,
#   skipped. KPROF_OTPS="27" make test: only that one; KPROF_OTPS="": none.
# A suite that cannot run here is not passed: it is reported SKIPPED, with why.
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
passed=0
failed=0
failures=""
skipped=""

run() {
  name=$1
  shift
  echo "==> $name"
  start=$(date +%s)
  if { "$@"; echo $? > "_build/test-$name.rc"; } 2>&1 | tee "_build/test-$name.log"; [ "$(cat "_build/test-$name.rc")" -eq 0 ]; then
    passed=$((passed + 1))
    echo "<== $name: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    failures="$failures $name"
    echo "<== $name: FAILED ($(( $(date +%s) - start )) s)"
  fi
}

# A suite whose optional dependency is missing: said loudly, counted, listed at the end.
skip() {
  echo "==> $1: SKIPPED: $2"
  skipped="$skipped $1"
}

mkdir -p _build/otp
# The Debian roots of OTP 27 and 29 (scripts/otp_root.sh: a few minutes each when
# not cached, mostly download and unpacking), built while the C suites run.
if [ "${KPROF_OTPS-27 29}" != "" ]; then
  { for suite in trixie sid; do scripts/otp_root.sh $suite; done; } > _build/otp/roots.log 2>&1 &
  roots_job=$!
fi
run check-c     $MAKE --no-print-directory check-c
# The sink and the NIF with clang, with the POSIX fallbacks, and with musl.
run portability $MAKE --no-print-directory check-portability
run check-asan  $MAKE --no-print-directory check-asan
run check-mem   $MAKE --no-print-directory check-mem
run eunit       $MAKE --no-print-directory eunit
run docs        $MAKE --no-print-directory docs doccheck doccheck-selftest readme-check sizecheck SIZECHECK=--check
run flame-volume $MAKE --no-print-directory check-flame-volume
# Every format in its own reader, warnings on (test/readers.mk): callgrind_annotate
# comes with valgrind (scripts/deps.sh); FlameGraph's scripts are no Debian package,
# so that half runs when FLAMEGRAPH_DIR or PATH has them, and is reported SKIPPED
# otherwise.
run readers     $MAKE --no-print-directory check-readers
if [ -n "${FLAMEGRAPH_DIR:-}" ] || command -v flamegraph.pl >/dev/null 2>&1; then
  run flamegraph $MAKE --no-print-directory check-flamegraph
else
  skip check-flamegraph "FlameGraph's flamegraph.pl, difffolded.pl and stackcollapse-perf.pl not found (no Debian package; set FLAMEGRAPH_DIR to a FlameGraph checkout)"
fi
# chromium is not among the packages `make deps` installs: installed here for
# the browser check (scripts/deps.sh browser), which is skipped, loudly, only
# when that cannot be done (not root, no package source).
if ! { command -v chromium >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }; then
  scripts/deps.sh browser || true
fi
if command -v chromium >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  run browser   $MAKE --no-print-directory check-browser
else
  skip check-browser "chromium or npm not installed and scripts/deps.sh browser could not install them (see above)"
fi
# KCachegrind, Xvfb and the tools that drive it, installed the same way.
command -v kcachegrind >/dev/null 2>&1 || scripts/deps.sh kcachegrind || true
if command -v kcachegrind >/dev/null 2>&1 && command -v xvfb-run >/dev/null 2>&1; then
  run kcachegrind $MAKE --no-print-directory check-kcachegrind
else
  skip check-kcachegrind "kcachegrind or xvfb not installed and scripts/deps.sh kcachegrind could not install them (see above)"
fi
# rebar3 (Debian's package) is installed here like chromium above; skipped,
# loudly, only when that cannot be done.
command -v rebar3 >/dev/null 2>&1 || scripts/deps.sh rebar3 || true
if command -v rebar3 >/dev/null 2>&1; then
  run rebar3    $MAKE --no-print-directory check-rebar3
else
  skip check-rebar3 "rebar3 not installed and scripts/deps.sh rebar3 could not install it (see above)"
fi
# Elixir, the same way: the mix project of examples/mix_demo.
{ command -v mix >/dev/null 2>&1 && command -v rebar3 >/dev/null 2>&1; } || scripts/deps.sh mix || true
if command -v mix >/dev/null 2>&1 && command -v rebar3 >/dev/null 2>&1; then
  run mix       $MAKE --no-print-directory check-mix
else
  skip check-mix "elixir (mix) or rebar3 not installed and scripts/deps.sh mix could not install them (see above)"
fi
# kprof as a dependency (test/deps.mk): the same tools, from a clone of HEAD.
if command -v mix >/dev/null 2>&1 && command -v rebar3 >/dev/null 2>&1 && command -v git >/dev/null 2>&1; then
  run deps      $MAKE --no-print-directory check-deps
else
  skip check-deps "elixir (mix), rebar3 or git not installed (see above)"
fi
run fuzz        $MAKE --no-print-directory fuzz-regress fuzz-run FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
run coverage    $MAKE --no-print-directory -j2 coverage

# The same tree on the other OTPs, after everything of this one, side by side.
if [ -n "${roots_job:-}" ]; then
  echo "==> the roots of OTP 27 and 29 (scripts/otp_root.sh, started with the C suites)"
  wait "$roots_job"
  cat _build/otp/roots.log
fi
# The OTPs side by side: each in namespaces of its own (scripts/otp_chroot.sh:
# its mounts, processes, loopback and epmd), so they share nothing but the two
# cores; one after the other they were half of make test's time. Each one's
# output is kept and printed whole when both are done.
for v in ${KPROF_OTPS-27 29}; do
  echo "==> otp-$v (beside the others; its output below when all are done)"
  { start=$(date +%s); scripts/otp_test.sh "$v"; rc=$?
    echo "$rc $(( $(date +%s) - start ))" > "_build/otp/test-$v.rc"; } > "_build/otp/test-$v.log" 2>&1 &
done
wait
for v in ${KPROF_OTPS-27 29}; do
  echo "==> otp-$v"
  cat "_build/otp/test-$v.log"
  read -r rc secs < "_build/otp/test-$v.rc" || { rc=1; secs=0; }
  case $rc in
    0) passed=$((passed + 1)); echo "<== otp-$v: ok ($secs s)" ;;
    2) skip "otp-$v" "$(cat "_build/otp/$v/summary")" ;;
    *) failed=$((failed + 1)); failures="$failures otp-$v"
       echo "<== otp-$v: FAILED ($secs s)" ;;
  esac
done

# One line per OTP: this system's (the suites above), then each root's.
echo "== tests per OTP =="
otp_here=$(erl -noshell -eval '{ok, V} = file:read_file(filename:join([code:root_dir(), "releases",
             erlang:system_info(otp_release), "OTP_VERSION"])), io:format("~s", [string:trim(V)]), halt().' 2>/dev/null)
set -- $(scripts/test_counts.sh check _build/test-check-c.log) $(scripts/test_counts.sh eunit _build/test-eunit.log)
if [ $# -eq 6 ]; then
  echo "OTP $otp_here (this system): $(($1 + $4)) tests passed, $(($2 + $5)) failed, $(($3 + $6)) skipped" \
       "(check-c $1/$(($1 + $2 + $3)), eunit $4/$(($4 + $5 + $6)))"
else
  echo "OTP $otp_here (this system): no counts (check-c or eunit did not report any)"
fi
for v in ${KPROF_OTPS-27 29}; do cat "_build/otp/$v/summary" 2>/dev/null || echo "OTP $v: not run"; done

if [ -n "$failures" ]; then
  # The failing tests, then by name, last, where a log's excerpt shows them.
  case "$failures" in
    *eunit*) echo "== the failing EUnit tests (full log: _build/eunit.log) =="
             grep -B1 -A14 '\*failed\*\|\*timed out\*' _build/eunit.log | head -120
             sh scripts/eunit_failures.sh _build/eunit.log "eunit: " | head -20 ;;
  esac
  for v in ${KPROF_OTPS-27 29}; do
    case "$failures" in
      *otp-$v*) sh scripts/eunit_failures.sh "_build/otp/$v/logs/eunit.log" "otp-$v eunit: " | head -20 ;;
    esac
  done
  echo "failed:$failures"
fi
[ -n "$skipped" ] && echo "SKIPPED (not run, not passed):$skipped"
echo "make test: $passed passed, $failed failed, $(echo $skipped | wc -w) skipped"
[ "$failed" -eq 0 ]
