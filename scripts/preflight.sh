#!/bin/sh
# Before kprof's C is compiled: is everything the build needs here? For each
# missing piece, one line that names it and the package that provides it on
# Debian/Ubuntu, Fedora, Alpine and macOS (Homebrew); exit 1 if any is missing.
# Prints nothing and exits 0 when all is there.
#
# Run by the Makefile before it compiles the sink or the NIF (with the flags it
# will compile with: CC, UV_CFLAGS, UV_LIBS, EI_DIR, ERL_ROOT), by rebar3's
# compile hook (rebar.config) and by mix.exs, before they call make. Run alone,
# it finds those itself as the Makefile does: erl_interface by
# code:lib_dir(erl_interface), libuv by pkg-config.
set -u

missing=0
# missing WHAT DEBIAN FEDORA ALPINE HOMEBREW
missing() {
  echo "kprof: missing $1: install $2 (Debian/Ubuntu), $3 (Fedora), $4 (Alpine), $5 (macOS, Homebrew)" >&2
  missing=$((missing + 1))
}

tmp=$(mktemp -d 2>/dev/null || mktemp -d -t kprof-preflight)
trap 'rm -rf "$tmp"' EXIT INT TERM

command -v "${MAKE:-make}" >/dev/null 2>&1 || missing "make" make make make make

CC=${CC:-cc}
have_cc=1
if ! command -v "$CC" >/dev/null 2>&1; then
  missing "a C compiler ($CC)" gcc gcc build-base "the Xcode tools (xcode-select --install)"
  have_cc=0
fi

have_erl=1
if ! command -v erl >/dev/null 2>&1; then
  missing "Erlang/OTP (erl)" erlang-nox erlang erlang erlang
  have_erl=0
fi

# erl_interface (ei.h, libei.a): the sink speaks the external term format
# with it. erl_nif.h: the tracer NIF. Both found from the running erl.
if [ $have_erl = 1 ] && { [ -z "${EI_DIR:-}" ] || [ -z "${ERL_ROOT:-}" ]; }; then
  dirs=$(erl -noshell -eval 'io:format("~s~n~s~n", [code:root_dir(), case code:lib_dir(erl_interface) of {error, _} -> ""; D -> D end]), halt().' 2>/dev/null)
  ERL_ROOT=$(echo "$dirs" | sed -n 1p)
  EI_DIR=$(echo "$dirs" | sed -n 2p)
fi
if [ $have_erl = 1 ] && { [ -z "${EI_DIR:-}" ] || [ ! -f "$EI_DIR/include/ei.h" ] || [ ! -f "$EI_DIR/lib/libei.a" ]; }; then
  missing "Erlang's erl_interface (ei.h, libei.a${EI_DIR:+ in $EI_DIR})" erlang-dev erlang-erl_interface erlang-dev erlang
fi
if [ $have_erl = 1 ] && [ ! -f "${ERL_ROOT:-}/usr/include/erl_nif.h" ]; then
  missing "Erlang's NIF header (erl_nif.h in ${ERL_ROOT:-the OTP root}/usr/include)" erlang-dev erlang-erts erlang-dev erlang
fi

# libuv: the sink's event loop. Its flags come from pkg-config, as in the Makefile.
if [ -z "${UV_LIBS:-}" ]; then
  if command -v pkg-config >/dev/null 2>&1; then
    if pkg-config --exists libuv 2>/dev/null; then
      UV_CFLAGS=$(pkg-config --cflags libuv)
      UV_LIBS=$(pkg-config --libs libuv)
    fi
  else
    missing "pkg-config" pkg-config pkgconf-pkg-config pkgconf pkg-config
  fi
fi
if [ $have_cc = 1 ]; then
  printf '#include <uv.h>\nint main(void) { return uv_version() == 0; }\n' > "$tmp/uv.c"
  # shellcheck disable=SC2086  # the flags are lists of words
  if ! "$CC" ${UV_CFLAGS:-} -c -o "$tmp/uv.o" "$tmp/uv.c" >/dev/null 2>&1; then
    missing "libuv's headers (uv.h)" libuv1-dev libuv-devel libuv-dev libuv
  elif ! "$CC" -o "$tmp/uv" "$tmp/uv.o" ${UV_LIBS:--luv} >/dev/null 2>&1; then
    missing "libuv's library (libuv.pc, libuv.a or libuv.so; linked with ${UV_LIBS:--luv})" \
      libuv1-dev "libuv-devel libuv-static" "libuv-dev libuv-static" libuv
  fi
fi

# libzstd: a capture's recording is compressed with it (port/record/record_write.c).
if [ $have_cc = 1 ]; then
  printf '#include <zstd.h>\nint main(void) { return ZSTD_versionNumber() == 0; }\n' > "$tmp/zstd.c"
  # shellcheck disable=SC2086  # the flags are lists of words
  if ! "$CC" -c -o "$tmp/zstd.o" "$tmp/zstd.c" >/dev/null 2>&1; then
    missing "zstd's headers (zstd.h)" libzstd-dev libzstd-devel zstd-dev zstd
  elif ! "$CC" -o "$tmp/zstd" "$tmp/zstd.o" ${ZSTD_LIBS:--lzstd} >/dev/null 2>&1; then
    missing "zstd's library (libzstd.so; linked with ${ZSTD_LIBS:--lzstd})" libzstd-dev libzstd-devel zstd-dev zstd
  fi
fi

if [ $missing -gt 0 ]; then
  echo "kprof: cannot build the sink and the tracer NIF: $missing missing (above)" >&2
  exit 1
fi
exit 0
