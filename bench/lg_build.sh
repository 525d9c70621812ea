#!/bin/sh
# Builds Looking Glass (rabbitmq/looking_glass) and its lz4 binding (rabbitmq/lz4-erlang)
# outside this repository, for `make bench-record' to compare against, the way the eflame
# and eflambe of bench/RESULTS.md were built: erlc and gcc, no rebar3, no erlang.mk (their
# Makefiles download dependencies). Their code is never committed here.
#
#   bench/lg_build.sh LG_SRC LZ4_SRC NIF_HELPERS_SRC DEST
#
# LG_SRC, LZ4_SRC, NIF_HELPERS_SRC: checked-out sources (nif_helpers: ninenines/nif_helpers,
# the header both NIFs include). DEST (e.g. $HOME/kprof-peers) gets
# DEST/looking_glass/{ebin,priv} and DEST/lz4/{ebin,priv}.
# Two departures from their own builds, both in how code is found, not in what it does:
# - lz4's NIF links Debian's liblz4 (apt-get install liblz4-dev, 1.9.4, the version its
#   Makefile pins) instead of a copy of lz4 built from source;
# - lz4-erlang's NIF module includes host_triple/include/code_loading.hrl (a hex package, not
#   reachable here) for one macro that loads priv/lz4_nif.so: a two-line header in the
#   build directory defines it with erlang:load_nif/2 on lz4's priv directory, and
#   lz4.app no longer lists host_triple among the applications it needs.
set -eu
[ $# -eq 4 ] || { echo "usage: $0 LG_SRC LZ4_SRC NIF_HELPERS_SRC DEST" >&2; exit 2; }
LG=$1 LZ4=$2 NH=$3 DEST=$4
[ -f /usr/include/lz4frame.h ] || { echo "$0: needs Debian's liblz4-dev (apt-get install liblz4-dev)" >&2; exit 1; }
ERTS_INC=$(erl -noshell -eval 'io:format("~s/erts-~s/include", [code:root_dir(), erlang:system_info(version)]), halt().')
CC=${CC:-gcc}
NIF_FLAGS="-O2 -fPIC -shared -I$ERTS_INC -I$NH"

mkdir -p "$DEST/lz4/ebin" "$DEST/lz4/priv" "$DEST/looking_glass/ebin" "$DEST/looking_glass/priv" \
         "$DEST/lz4/shim/host_triple/include"
DEST=$(cd "$DEST" && pwd)
cat > "$DEST/lz4/shim/host_triple/include/code_loading.hrl" <<'EOF'
-define(load_nif_from_host_triple_dir(App, Name, Info),
        erlang:load_nif(filename:join(code:priv_dir(App), Name), Info)).
EOF

# lz4: the NIF (its two C files and nif_helpers' against Debian's liblz4), then the modules.
$CC $NIF_FLAGS -Wno-implicit-function-declaration -o "$DEST/lz4/priv/lz4_nif.so" \
    "${LZ4}/c_src/lz4.c" "${LZ4}/c_src/lz4f.c" "${NH}/nif_helpers.c" -llz4
(cd "$LZ4" && erlc -I "$DEST/lz4/shim" -o "$DEST/lz4/ebin" src/*.erl)
sed 's/,host_triple\]/]/' "$LZ4/ebin/lz4.app" > "$DEST/lz4/ebin/lz4.app"

# looking_glass: its tracer NIF, then the modules (lg_* include nothing outside src/).
$CC $NIF_FLAGS -o "$DEST/looking_glass/priv/lg_tracer.so" "${LG}/c_src/lg_tracer.c" "${NH}/nif_helpers.c"
(cd "$LG" && erlc -o "$DEST/looking_glass/ebin" src/*.erl)
cp "$LG/ebin/looking_glass.app" "$DEST/looking_glass/ebin/"
echo "$0: built $DEST/looking_glass and $DEST/lz4"
