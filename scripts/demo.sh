#!/bin/sh
# `make demo': the example shop (examples/shop) under load, profiled by kprof:
# tiers, their report, a flame graph of one slow request, and a sampled flame
# graph of the node under load (the VM runs with +JPperf map for it). No arguments, no
# input; the VM it starts stops itself (after 55 s at the latest), and its sink
# exits with it.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
make --no-print-directory all shop
# logger at warning: kprof's alerts show, the application stop reports do not.
exec timeout -k 5 90 erl +JPperf map -noshell -kernel logger_level warning \
  -pa erlang/ebin -pa _build/shop/ebin -eval 'shop_demo:main()' </dev/null
