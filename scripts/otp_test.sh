#!/bin/sh
# scripts/otp_test.sh OTP [SUITE...]: kprof's suites on another OTP (`make
# test-otp OTP=27`), in a Debian root that has it (scripts/otp_root.sh):
#   25 -> bookworm (OTP 25.2), 27 -> trixie (OTP 27.3), 29 -> sid (OTP 29.1).
# A copy of the tree (git's tracked and untracked files, no build output) in
# _build/otp/OTP/.src (hidden from tools that look for every ebin/ under the
# tree: another OTP's beams do not load here) is built there and tested inside the root
# (scripts/otp_chroot.sh: namespaces of the run's own), so that no object
# of one OTP meets another's. The suites, all by default:
#   build    the sink, the NIF, the Erlang code and the tests: no warning
#            of gcc or erlc
#   check-c  the Check suites
#   eunit    the EUnit suites with no CA certificates, run by the root's rebar3
#            (`rebar3 eunit`, in another order than `make eunit` runs them on
#            this system; OTP_EUNIT=make: by make eunit)
#   docs     edoc with no warning, every export documented, the docs check
#   mix      make check-mix with the root's Elixir
#   rebar3   make check-rebar3 with the root's rebar3 (xref, dialyzer, edoc)
# Prints one line at the end, also written to _build/otp/OTP/summary:
#   OTP 27.3.4 (trixie): 892 tests passed, 0 failed, 0 skipped (Check 227/227,
#   EUnit 665/665); suites ok: build check-c eunit docs mix rebar3
# Logs: _build/otp/OTP/logs/SUITE.log. Exits 0 when every suite passed, 2 when
# the root cannot be had here (SKIPPED, with why), 1 otherwise.
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
otp=${1:-}
[ $# -gt 0 ] && shift
suites=${*:-build check-c eunit docs mix rebar3}

# Inside the root: each suite, timed, its log kept, a line per suite in results.
if [ "$otp" = --in-root ]; then
  cd /tmp/kprof/.src
  mkdir -p ../logs
  : > ../results
  make=make
  tests=$(ls erlang/test/*.erl | sed 's|^erlang/test/\(.*\)\.erl$|_build/test/ebin/\1.beam|')
  for s in $suites; do
    start=$(date +%s)
    log=../logs/$s.log
    case $s in
      build)   $make -j2 all _build/fault/kprof_sink _build/test/check_kprof $tests ;;
      check-c) $make check-c ;;
      # With no CA certificates (an empty /etc/ssl/certs, for this run only),
      # as on a minimal system: loopback http must not need them.
      eunit)   mount -t tmpfs -o ro,size=4k nocerts /etc/ssl/certs &&
                 if [ "${OTP_EUNIT:-rebar3}" = make ]; then $make eunit; else rebar3 eunit -v; fi; r=$?
               umount /etc/ssl/certs; (exit $r) ;;
      docs)    $make docs doccheck ;;
      mix)     $make check-mix ;;
      rebar3)  $make check-rebar3 ;;
      *)       echo "unknown suite $s"; false ;;
    esac > "$log" 2>&1
    rc=$?
    # A warning of gcc, clang or erlc fails the build, whatever make said.
    if [ "$s" = build ] && grep -n 'warning:\|Warning:' "$log" > ../logs/warnings.txt; then
      echo "== $(wc -l < ../logs/warnings.txt) compiler warnings:"; cat ../logs/warnings.txt
      rc=1
    fi
    counts=""
    case $s in
      check-c) counts=$(sh scripts/test_counts.sh check "$log") ;;
      eunit|mix) counts=$(sh scripts/test_counts.sh "$s" "$log") ;;
    esac
    echo "$s $rc $(( $(date +%s) - start )) ${counts:-- - -}" >> ../results
    [ "$rc" -eq 0 ] && echo "  $s: ok ($(( $(date +%s) - start )) s)" ||
      { echo "  $s: FAILED ($(( $(date +%s) - start )) s)"
        # Which tests failed and why (a log's end names none of them).
        if grep -q '\*failed\*\|\*timed out\*\|\*\*\* context' "$log"; then
          echo "  the failures in ${log#../}:"
          grep -n -B2 -A30 '\*failed\*\|\*timed out\*\|\*\*\* context' "$log" | head -150 | sed 's/^/    /'
        fi
        echo "  the end of ${log#../}:"; tail -40 "$log" | sed 's/^/    /'; }
  done
  exit 0
fi

case "$otp" in
  25) suite=bookworm ;;
  27) suite=trixie ;;
  29) suite=sid ;;
  *) echo "usage: $0 25|27|29 [build check-c eunit docs mix rebar3]" >&2; exit 64 ;;
esac
w=$top/_build/otp/$otp
mkdir -p "$w"
rm -f "$w/summary"
say() { echo "$*" | tee "$w/summary"; }

roots=${KPROF_ROOTS:-/var/cache/kprof/roots}
root=$(scripts/otp_root.sh "$suite")
rc=$?
case $rc in
  0) ;;
  2) say "OTP $otp ($suite): SKIPPED, not run: ${root#SKIPPED: }"; exit 2 ;;
  *) say "OTP $otp ($suite): FAILED: its root could not be built (scripts/otp_root.sh $suite, above)"; exit 1 ;;
esac
# The run holds its root (shared): otp_root.sh removes an old root only when
# no run holds it.
exec 9>"$roots/.$(basename "$root").lock"
flock -s 9
[ -x "$root/bin/sh" ] || { say "OTP $otp ($suite): FAILED: the root $root went away"; exit 1; }
have=$(cat "$root"/usr/lib/erlang/releases/*/OTP_VERSION | head -1)
case "$have" in
  "$otp"|"$otp".*) ;;
  *) say "OTP $otp ($suite): SKIPPED, not run: $suite has OTP $have now, not $otp (scripts/otp_test.sh names the suite of each OTP)"
     exit 2 ;;
esac

# The copy: what git tracks and what it does not ignore (a change not yet
# committed is tested too); outside git, the tree without its build outputs.
rm -rf "$w/.src" "$w/logs" "$w/results"
mkdir -p "$w/.src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -c -o --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$w/.src"
  # Links (src, priv) that git tracks are copied as links by tar.
else
  tar --exclude=./_build --exclude=./erlang/ebin --exclude=./erlang/doc --exclude=./erlang/priv/kprof_sink \
      --exclude=./erlang/priv/kprof_tracer.so -cf - . | tar -xf - -C "$w/.src"
fi
echo "OTP $have ($suite, $root): $suites"
start=$(date +%s)
scripts/otp_chroot.sh --net --bind "$w" "$root" \
  "OTP_EUNIT=${OTP_EUNIT:-rebar3} sh /tmp/kprof/.src/scripts/otp_test.sh --in-root $suites" 2>&1
passed=0 failed=0 skipped=0 ok="" bad="" counts=""
while read -r s rc secs p f k; do
  if [ "$rc" -eq 0 ]; then ok="$ok $s"; else bad="$bad $s"; fi
  [ "$p" = - ] && continue
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k))
  counts="$counts, $s $p/$((p + f + k))"
done < "$w/results"
for s in $suites; do grep -q "^$s " "$w/results" 2>/dev/null || bad="$bad $s(not run)"; done
counts=${counts#, }
line="OTP $have ($suite): $passed tests passed, $failed failed, $skipped skipped (${counts:-no counts})"
line="$line; suites ok:${ok:- none}${bad:+; FAILED:$bad} ($(( $(date +%s) - start )) s)"
say "$line"
[ -z "$bad" ]
