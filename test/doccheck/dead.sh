#!/bin/sh
# A script with dead names in its comments and usage text (`make doccheck-selftest`).
# Live: scripts/test.sh, ks_ring.h, `make eunit`; /tmp/x and /usr/bin/env are the system's.
# Dead: scripts/no_such.sh, no_such_tool.escript, and a tool beside the checkout:
#   /work/shared/tools/no_such.py
echo "usage: dead.sh [no_such_input.md] (see port/no_such/usage.c)" >&2
exec /home/someone/kprof/scripts/test.sh "$@"
not_checked=port/no_such_in_code.c
