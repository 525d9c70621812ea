#!/bin/sh
# scripts/otp_make.sh OTP TARGET [--bring PATH]... [VAR=VALUE...]: a make target
# of the tree run on another OTP, in the Debian root that has it (`make
# bench-otp OTP=27 BENCH=bench-overhead`, `make otp-make OTP=29
# TARGET=fuzz-otp-corpus OTP_BRING=fuzz/otp/29`): the copy of the tree
# scripts/otp_test.sh builds there (its build suite: no warning) in
# _build/otp/OTP/.src, then `make TARGET VAR=VALUE...` inside the root
# (scripts/otp_chroot.sh). Each --bring PATH is copied back from the copy
# into this tree afterwards (what the target wrote for this OTP).
# A bench-* target rewrites sections of the copy's bench/RESULTS.md: that
# file is kept as _build/otp/OTP/bench/TARGET.md, and the section "Other OTPs
# side by side" of bench/RESULTS.md is written again from every OTP's there
# (scripts/otp_bench_table.escript).
set -u
cd "$(dirname "$0")/.."
otp=${1:-}
target=${2:-}
[ -n "$otp" ] && [ -n "$target" ] || { echo "usage: $0 25|27|29 TARGET [--bring PATH]... [VAR=VALUE...]" >&2; exit 64; }
shift 2
bring=""
while [ "${1:-}" = --bring ]; do bring="$bring $2"; shift 2; done
w=_build/otp/$otp
scripts/otp_test.sh "$otp" build
rc=$?
[ $rc -eq 0 ] || exit $rc
root=$(scripts/otp_root.sh "$(sed -n 's/^OTP [^ ]* (\([a-z]*\).*/\1/p' "$w/summary")")
[ -x "$root/bin/sh" ] || { echo "otp_make: no root for OTP $otp" >&2; exit 1; }
exec 9>"${KPROF_ROOTS:-/var/cache/kprof/roots}/.$(basename "$root").lock"
flock -s 9
mkdir -p "$w/make"
echo "otp_make: make $target $* on OTP $otp ($root); load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
scripts/otp_chroot.sh --net --bind "$w" "$root" \
  "cd /tmp/kprof/.src && make --no-print-directory $target $*; echo \$? > /tmp/kprof/make/$target.rc" \
  2>&1 | tee "$w/make/$target.log"
rc=$(cat "$w/make/$target.rc" 2>/dev/null || echo 1)
echo "otp_make: OTP $otp $target: exit $rc, $(( $(date +%s) - start )) s, load after $(cut -d' ' -f1-3 /proc/loadavg)"
for p in $bring; do
  rm -rf "$p" && mkdir -p "$(dirname "$p")" && cp -a "$w/.src/$p" "$p" && echo "otp_make: brought back $p"
done
case $target in
  bench-*)
    mkdir -p "$w/bench"
    cp "$w/.src/bench/RESULTS.md" "$w/bench/$target.md"
    scripts/otp_bench_table.escript bench/RESULTS.md _build/otp ;;
esac
exit "$rc"
