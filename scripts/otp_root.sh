#!/bin/sh
# scripts/otp_root.sh SUITE: a cached Debian root filesystem with another
# OTP, for `make test-otp` (scripts/otp_test.sh): bookworm (OTP 25), trixie
# (OTP 27) or sid (OTP 29 today), with the packages kprof's tests need.
#
#   $KPROF_ROOTS/SUITE        (default /var/cache/kprof/roots/SUITE)
#
# Built with debootstrap from the Debian archive that /etc/apt names (or
# $KPROF_DEBIAN_MIRROR), and rebuilt when older than $KPROF_ROOT_MAX_AGE days
# (7) or when it lacks a package of the list below. A rebuild goes into
# SUITE.<time> beside it; SUITE is then turned into a link to it in one
# rename, so a run that uses the old root keeps it: an old root is removed
# only when no run holds its lock (scripts/otp_test.sh holds it, shared, for
# the whole run). Two builds of one suite wait for each other.
#
# Prints the root's directory on stdout (progress goes to stderr). Exits 0
# when it is ready, 2 when it cannot be built here (not root, no debootstrap,
# no archive to reach), after a line "SKIPPED: otp_root SUITE: why", and 1
# when a build failed (its log is SUITE.<time>.log).
set -eu
suite=${1:-}
roots=${KPROF_ROOTS:-/var/cache/kprof/roots}
max_age=${KPROF_ROOT_MAX_AGE:-7}
here=$(cd "$(dirname "$0")" && pwd)

case "$suite" in
  bookworm|trixie|sid) ;;
  *) echo "usage: $0 bookworm|trixie|sid" >&2; exit 64 ;;
esac

# What the suites of make test-otp run with. The first list goes into
# debootstrap; the second is installed by apt-get in the new root, without
# recommends: rebar3 depends on erlang-reltool, which depends on erlang-wx and
# GTK, and in debootstrap's second stage dconf-service's script fails (no D-Bus).
BASE_PKGS="erlang-nox erlang-dev erlang-dialyzer libc6-dev gcc make pkg-config libuv1-dev libzstd-dev check
  ca-certificates git python3 procps perl"
MORE_PKGS="erlang-mochiweb erlang-p1-sqlite3 erlang-bbmustache valgrind elixir rebar3 clang libclang-rt-dev llvm
  musl-tools"
PKGS=$(echo $BASE_PKGS $MORE_PKGS)

# Progress on stderr; stdout has only the root's directory (or why not).
say() {
  echo "otp_root: $*" >&2
}

skip() {
  echo "SKIPPED: otp_root $suite: $*" >&2
  echo "SKIPPED: otp_root $suite: $*"
  exit 2
}

# The root's packages all installed, nothing half-configured.
complete() {
  [ -x "$1/bin/sh" ] || return 1
  st=$(chroot "$1" dpkg-query -W -f='${db:Status-Abbrev}\n' $PKGS 2>/dev/null) || return 1
  [ "$(echo "$st" | grep -c '^ii')" -eq "$(echo $PKGS | wc -w)" ] || return 1
  [ -z "$(chroot "$1" dpkg --audit 2>/dev/null)" ]
}

# Days since the root was built (its stamp; an adopted root without one: the
# last change of its package database).
age_days() {
  stamp=$1/etc/kprof-root
  [ -f "$stamp" ] || stamp=$1/var/lib/dpkg/status
  echo $(( ($(date +%s) - $(stat -c %Y "$stamp")) / 86400 ))
}

# The first Debian archive /etc/apt names (deb822 .sources or one-line lists),
# not its security archive.
mirror() {
  if [ -n "${KPROF_DEBIAN_MIRROR:-}" ]; then echo "$KPROF_DEBIAN_MIRROR"; return; fi
  m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
      awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }')
  m="$m
$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }')"
  m=$(echo "$m" | grep -v security | grep -E 'debian.?$' | head -1)
  echo "${m:-http://deb.debian.org/debian}"
}

# Replaces the directory or link $2 by the link $1, in one rename where the
# kernel can exchange two names (renameat2), so that no run finds no root.
swap_in() {
  if [ -L "$2" ] || [ ! -e "$2" ]; then
    mv -T "$1" "$2"
  elif python3 - "$1" "$2" <<'EOF' 2>/dev/null
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2) != 0:
    sys.exit(os.strerror(ctypes.get_errno()))
EOF
  then
    mv -T "$1" "$2.adopted.$(date +%Y%m%d%H%M%S)"
  else
    mv -T "$2" "$2.adopted.$(date +%Y%m%d%H%M%S)" && mv -T "$1" "$2"
  fi
}

# Old roots of this suite that no run holds: removed.
prune() {
  current=$(readlink -f "$roots/$suite")
  for d in "$roots/$suite".*; do
    [ -d "$d" ] && [ ! -L "$d" ] || continue
    [ "$(readlink -f "$d")" = "$current" ] && continue
    case "$d" in *.building|*.log) continue ;; esac
    if [ ! -f "$d/etc/kprof-root" ]; then
      say "$d, a root this script did not build, is kept: remove it when no one uses it"
      continue
    fi
    lock="$roots/.$(basename "$d").lock"
    if flock -n -x "$lock" rm -rf "$d"; then
      rm -f "$lock"
      say "removed the old root $d"
    fi
  done
}

[ "$(id -u)" -eq 0 ] || skip "debootstrap and chroot need root, and this runs as $(id -un)"
mkdir -p "$roots"
exec 8>"$roots/.$suite.build.lock"
flock -x 8

if [ -e "$roots/$suite" ] && complete "$roots/$suite" && [ "$(age_days "$roots/$suite")" -lt "$max_age" ]; then
  prune
  readlink -f "$roots/$suite"
  exit 0
fi

why="none yet"
[ -e "$roots/$suite" ] && why="$(age_days "$roots/$suite") days old, or a package missing"
if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null 2>&1 ||
    { apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null 2>&1; } ||
    skip "debootstrap is not installed and apt-get could not install it"
fi
url=$(mirror)
if ! wget -q -T 20 -t 2 -O /dev/null "$url/dists/$suite/Release" 2>/dev/null &&
   ! curl -fsS -m 20 -o /dev/null "$url/dists/$suite/Release" 2>/dev/null; then
  if [ -e "$roots/$suite" ] && complete "$roots/$suite"; then
    say "$url cannot be reached: the root of $suite is $(age_days "$roots/$suite") days old and kept"
    readlink -f "$roots/$suite"
    exit 0
  fi
  skip "the Debian archive $url cannot be reached (no $url/dists/$suite/Release)"
fi

new="$roots/$suite.$(date +%Y%m%d%H%M%S)"
log="$new.log"
say "building the root of $suite ($why) from $url into $new (log: $log)"
start=$(date +%s)
rm -rf "$new.building"
# debootstrap mounts /proc and /sys in the new root: in a mount namespace of
# its own, so that a failure leaves nothing mounted.
if ! unshare --mount --propagation private debootstrap --variant=minbase \
       --include="$(echo $BASE_PKGS | tr ' ' ,)" "$suite" "$new.building" "$url" >"$log" 2>&1; then
  tail -20 "$log" >&2
  rm -rf "$new.building"
  say "debootstrap of $suite failed (log: $log)"
  exit 1
fi
# The rest without recommends; no service starts in the root (policy-rc.d).
printf '#!/bin/sh\nexit 101\n' > "$new.building/usr/sbin/policy-rc.d"
chmod +x "$new.building/usr/sbin/policy-rc.d"
# (A Release file past its Valid-Until is taken: the archive may be a
# snapshot older than this machine's clock, as debootstrap took it.)
apt="apt-get -o Acquire::Check-Valid-Until=false -o Acquire::Check-Date=false"
if ! "$here/otp_chroot.sh" "$new.building" "
       export DEBIAN_FRONTEND=noninteractive
       $apt update -qq && $apt install -y -qq --no-install-recommends $(echo $MORE_PKGS) && apt-get clean" >>"$log" 2>&1 ||
   ! complete "$new.building"; then
  tail -20 "$log" >&2
  rm -rf "$new.building"
  say "the packages of $suite could not be installed (log: $log)"
  exit 1
fi
rm -f "$new.building/usr/sbin/policy-rc.d"
# (bookworm's minbase has no /etc/hosts; otp_chroot.sh mounts its own over it.)
[ -e "$new.building/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' > "$new.building/etc/hosts"
rm -rf "$new.building/debootstrap"
otp=$(cat "$new.building"/usr/lib/erlang/releases/*/OTP_VERSION 2>/dev/null | head -1)
printf 'suite=%s\nbuilt=%s\nmirror=%s\notp=%s\npackages=%s\n' "$suite" "$(date -u +%FT%TZ)" "$url" "$otp" "$PKGS" \
  > "$new.building/etc/kprof-root"
mv -T "$new.building" "$new"
ln -sfn "$(basename "$new")" "$roots/.$suite.link"
swap_in "$roots/.$suite.link" "$roots/$suite"
say "$suite (OTP $otp) built in $(( $(date +%s) - start )) s"
prune
readlink -f "$roots/$suite"
