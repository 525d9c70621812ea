#!/bin/sh
# bench/nif_instructions.sh: instructions per traced call, by callgrind, for the modes of
# bench/overhead_bench.erl (`make bench-nif-instructions`).
#
#   bench/nif_instructions.sh [N1 N2]
#
# For each mode (untraced, the null NIF tracer, the kprof_tracer NIF's rings) the VM runs
# the overhead bench's loop of N1 and then N2 calls under callgrind (one scheduler, no busy
# waiting), and the instructions per event are the difference of the two totals over
# N2 - N1 (what the VM does once, its start and the ring's warm-up lap, cancels out).
# Also the tracer callbacks' own (kprof_tracer's enabled/3 and trace/5, inclusive of what
# they call): the NIF's part alone. Instruction counts do not move with the machine's
# load, as times do; they do not show cache misses either.
#
# Needs valgrind and an OTP whose JIT runs under it: +JMsingle true (OTP 26 and later;
# on OTP 25 the JIT's double mapping of code crashes valgrind). Writes callgrind files to
# $B/bench/callgrind.MODE.N.
set -e
N1=${1:-20000}
N2=${2:-120000}
B=${B:-_build}
SINK=$(pwd)/erlang/priv/kprof_sink
if ! erl +JMsingle true -noshell -eval 'halt().' >/dev/null 2>&1; then
  echo "nif_instructions: this OTP's JIT has no +JMsingle (OTP 26 and later): valgrind cannot run it" >&2
  exit 1
fi
ROOT=$(erl -noshell -eval 'io:format("~s", [code:root_dir()]), halt().')
BIN=$ROOT/erts-$(erl -noshell -eval 'io:format("~s", [erlang:system_info(version)]), halt().')/bin
export BINDIR=$BIN ROOTDIR=$ROOT EMU=beam PROGNAME=erl

total() {   # mode calls: the run's instructions
  valgrind --tool=callgrind --callgrind-out-file="$B/bench/callgrind.$1.$2" \
    "$BIN/beam.smp" -JMsingle true -S 1:1 -SDcpu 1:1 -SDio 1 -sbwt none -sbwtdcpu none \
    -sbwtdio none -- -root "$ROOT" -bindir "$BIN" -progname erl -home "${HOME:-/tmp}" -noshell \
    -pa erlang/ebin -pa "$B/bench" \
    -eval "{module, _} = code:ensure_loaded(overhead_bench),
           _ = overhead_bench:run_mode($1, \"$SINK\", $2), halt()." 2>&1 |
    sed -n 's/.*Collected : //p'
}

callbacks() {   # mode calls: kprof_tracer's enabled/3 and trace/5, inclusive
  callgrind_annotate --inclusive=yes "$B/bench/callgrind.$1.$2" 2>/dev/null |
    awk '/kprof_tracer_nif.c:nif_(trace|enabled) / { gsub(",", "", $1); s += $1 } END { print s + 0 }'
}

echo "| mode | instructions per event | of which the tracer's callbacks |"
echo "|---|--:|--:|"
for mode in untraced nif_null nif_ring; do
  a=$(total $mode "$N1")
  b=$(total $mode "$N2")
  ca=$(callbacks $mode "$N1")
  cb=$(callbacks $mode "$N2")
  echo "| $mode | $(( (b - a) / (N2 - N1) )) | $(( (cb - ca) / (N2 - N1) )) |"
done
