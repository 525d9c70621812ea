#!/bin/sh
# bench/ir.sh: the sink's instructions per event, counted by callgrind (valgrind's Ir),
# the comparison that holds on a loaded machine (`make bench-ir`).
#
#   bench/ir.sh BIN_DIR STREAM [TRACE]
#
# BIN_DIR/sink_modes (bench/sink_modes.c) on STREAM, a recorded stream of trace
# messages (bench/gen_stream.erl; `make bench-stream`), one mode at a time
# (SINK_MODES_ONLY): decoded; flame_stacks (the stream fed twice: once to learn its
# pids, once into a capture of every process); tier_aggregated (IR_REQUESTS synthetic
# requests, 100000 by default). Then BIN_DIR/flame_sink (bench/flame_sink.c) on TRACE,
# the compile workload's recording (bench/flame_real.erl; `make bench-flame-sink` records
# it), when given: both stack models, each read and written as a folded file. One line
# per run: its name, Ir of the whole process (setup included), the events it fed, Ir per
# event. To compare two trees, run it with each tree's BIN_DIR on the same STREAM and
# TRACE.
set -eu
D=$1
STREAM=$2
TRACE=${3:-}
REQ=${IR_REQUESTS:-100000}
OUT=$(mktemp -d) && trap 'rm -rf "$OUT"' EXIT

command -v valgrind >/dev/null || { echo "bench-ir: valgrind is not installed" >&2; exit 1; }
# run NAME ARGS...: callgrind of one run; prints NAME, Ir, events, Ir per event.
run() {
  name=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" > "$OUT/out" 2> "$OUT/err"
  ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$OUT/err")
  ev=$(sed -n 's/.* \(msgs\|events\)=\([0-9]*\).*/\2/p' "$OUT/out" | awk '{ n += $1 } END { print n + 0 }')
  [ -n "$ir" ] && [ "$ev" -gt 0 ] || { echo "bench-ir: $name failed:" >&2; cat "$OUT/err" >&2; exit 1; }
  awk -v n="$name" -v ir="$ir" -v ev="$ev" 'BEGIN { printf "%-16s %16s Ir %10s events %8.1f Ir/event\n", n, ir, ev, ir / ev }'
}

echo "bench-ir: $D, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in decoded flame_stacks tier_aggregated; do
  SINK_MODES_ONLY=$mode run "$mode" "$D/sink_modes" "$STREAM" "$REQ" 1
done
if [ -n "$TRACE" ] && [ -s "$TRACE" ]; then
  run flame_sink "$D/flame_sink" "$TRACE" 1
else
  echo "bench-ir: no trace ${TRACE:-given} for flame_sink (make bench-flame-sink records it)"
fi
