#!/bin/sh
# Installs the Debian 12 packages kprof needs, or says exactly what to install.
# Run by `make demo` and `make test`; as root it uses apt-get, otherwise it stops
# with the apt-get line to run.
set -eu

PKGS="gcc make pkg-config erlang-nox erlang-dev erlang-mochiweb erlang-p1-sqlite3 erlang-bbmustache libuv1-dev libzstd-dev check clang libclang-rt-dev llvm valgrind musl-tools"
# `scripts/deps.sh browser` (make check-browser): chromium, and node/npm when missing.
if [ "${1:-}" = browser ]; then
  PKGS="$PKGS chromium"
  command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
  command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"
fi
# `scripts/deps.sh rebar3` (make check-rebar3): Debian's rebar3, which brings dialyzer.
if [ "${1:-}" = rebar3 ]; then
  PKGS="$PKGS rebar3 erlang-dialyzer"
fi
# `scripts/deps.sh kcachegrind` (make check-kcachegrind): the viewer, graphviz for its
# call graph, and what runs it without a screen and takes its picture.
if [ "${1:-}" = kcachegrind ]; then
  PKGS="$PKGS kcachegrind graphviz xvfb xauth dbus xdotool imagemagick"
fi
# `scripts/deps.sh mix` (make check-mix): Elixir and the rebar3 mix builds kprof with.
if [ "${1:-}" = mix ]; then
  PKGS="$PKGS elixir rebar3"
fi

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "kprof needs these Debian packages:$missing" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# Another apt or dpkg (unattended upgrades on a fresh machine) holds the lock:
# wait for it rather than fail.
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
echo "deps: installed$missing"
