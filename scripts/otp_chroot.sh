#!/bin/sh
# scripts/otp_chroot.sh [--net] [--bind DIR] ROOT COMMAND: runs the shell
# command COMMAND inside the Debian root ROOT (scripts/otp_root.sh builds it),
# as root, in namespaces of its own, so that runs beside each other never see
# each other's mounts, processes or ports, and nothing is left when it ends:
#   - a private mount namespace: /proc, /sys (read-only), /dev, a /dev/shm and
#     a /tmp of its own (tmpfs) are mounted in ROOT for this run only;
#   - a PID namespace: every process the command left (an epmd, a beam node,
#     a sink) is killed when it ends;
#   - with --net, a network namespace with only a loopback (the tests: their
#     ports and epmd are the run's own), where the host's name is 127.0.0.1;
#     without it, the host's network and resolver (apt-get).
#   - --bind DIR mounts the host directory DIR at /tmp/kprof in ROOT.
# The command runs with a clean environment: HOME=/tmp/kprof/home with --bind
# (its caches, such as dialyzer's PLT, kept between runs), else /tmp.
# Exits with COMMAND's status.
set -eu
net=""
bind=""
while :; do
  case "${1:-}" in
    --net) net=--net; shift ;;
    --bind) bind=$(cd "$2" && pwd); shift 2 ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || { echo "usage: $0 [--net] [--bind DIR] ROOT COMMAND" >&2; exit 64; }
root=$(cd "$1" && pwd -P)
[ -x "$root/bin/sh" ] || { echo "otp_chroot: $root is not a root filesystem (no bin/sh)" >&2; exit 1; }

# The inner script runs as PID 1 of the new namespaces, with the mounts private.
exec unshare --mount --propagation private --pid --fork $net \
  sh -eu -c '
    root=$1 bind=$2 net=$3 cmd=$4
    # The root a mount point of its own: `unshare --mount` inside it (a
    # test that mounts a small tmpfs) can then change its propagation.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys" 2>/dev/null || mount --rbind -o ro /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount -t tmpfs -o mode=1777 tmp "$root/tmp"
    home=/tmp
    if [ -n "$bind" ]; then
      mkdir -p "$root/tmp/kprof"
      mount --bind "$bind" "$root/tmp/kprof"
      mkdir -p "$bind/home"
      home=/tmp/kprof/home
    fi
    if [ -n "$net" ]; then
      ip link set lo up
      # (A minbase root of bookworm has no /etc/hosts to mount over.)
      [ -e "$root/etc/hosts" ] || : > "$root/etc/hosts"
      printf "127.0.0.1\t%s localhost\n::1\tlocalhost\n" "$(hostname)" > "$root/tmp/.hosts"
      mount --bind "$root/tmp/.hosts" "$root/etc/hosts"
    elif [ -f /etc/resolv.conf ]; then
      cp -L /etc/resolv.conf "$root/tmp/.resolv.conf"
      [ -e "$root/etc/resolv.conf" ] || : > "$root/etc/resolv.conf"
      mount --bind "$root/tmp/.resolv.conf" "$root/etc/resolv.conf"
    fi
    exec chroot "$root" /usr/bin/env -i HOME="$home" LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb \
      PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin CI="${CI:-}" \
      /bin/sh -c "$cmd"
  ' otp_chroot "$root" "$bind" "$net" "$2"
