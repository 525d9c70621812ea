#!/bin/sh
# A throwaway PostgreSQL server for the shop (examples/shop): 127.0.0.1 only,
# trust authentication, user and database "shop", data in _build/shop/pg.
#
#   examples/shop/pg.sh start [PORT]   initdb if needed, start, create the database
#   examples/shop/pg.sh stop           stop it (the data stays until make clean)
#
# then, in erl: shop:start(#{db => {postgres, #{port => PORT}}}).
# Needs Debian's postgresql and erlang-p1-pgsql; as root the server runs as the
# postgres user.
set -eu
cd "$(dirname "$0")/../.."
cmd=${1:-}
port=${2:-55432}
dir=$(pwd)/_build/shop/pg
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ]; then
  echo "pg.sh: PostgreSQL is not installed: apt-get install postgresql erlang-p1-pgsql" >&2
  exit 1
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_owner "'$bin/initdb' -D '$dir/data' -A trust -U shop >'$dir/initdb.log'"
    fi
    if ! as_owner "'$bin/pg_ctl' -D '$dir/data' status >/dev/null"; then
      as_owner "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w \
        -o \"-h 127.0.0.1 -p $port -k '$dir'\" start >/dev/null"
    fi
    port=$(sed -n 4p "$dir/data/postmaster.pid")
    as_owner "'$bin/psql' -h 127.0.0.1 -p $port -U shop -d postgres -tAc \
      \"SELECT 1 FROM pg_database WHERE datname = 'shop'\"" | grep -q 1 ||
      as_owner "'$bin/createdb' -h 127.0.0.1 -p $port -U shop shop"
    echo "PostgreSQL on 127.0.0.1:$port, database shop; in erl:"
    echo "  shop:start(#{db => {postgres, #{port => $port}}})."
    ;;
  stop)
    if as_owner "'$bin/pg_ctl' -D '$dir/data' status >/dev/null 2>&1"; then
      as_owner "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop >/dev/null"
      echo "PostgreSQL stopped"
    else
      echo "PostgreSQL is not running"
    fi
    ;;
  *)
    echo "usage: examples/shop/pg.sh start [PORT] | stop" >&2
    exit 2
    ;;
esac
