#!/usr/bin/env bash
# bench/run.sh: the sink throughput benchmark (run by `make bench`, which builds what it needs).
#
#   B=_build SINK=erlang/priv/kprof_sink BENCH_RUNS=5 bench/run.sh
#   bench/run.sh --stream-only       record the stream if it is missing, nothing else
#
# 1. Records $B/bench/stream.bin (>= BENCH_MSGS real trace messages, bench/gen_stream.erl)
#    unless it and stream.count are there already.
# 2. Replays it through a pipe (bench/replay.c) into the framing-only reader
#    (bench/frame_only.c) and into kprof_sink, BENCH_RUNS times each, interleaved, after
#    one warm-up run of each; every run must see every message (replay --expect fails
#    loudly otherwise, and so does this script).
# 3. Prints the medians, the ratio sink / framing-only and PASS/FAIL against the targets
#    (>= 10 M msgs/s decoded, >= 50 % of the framing-only rate), and the sink's CPU time
#    per message (perf stat task-clock when perf works, and wait4's user+sys).
# 4. In one process (bench/sink_modes.c), the sink's work by mode side by side: framing
#    only, decoded, flame stacks of every process, and tier-aggregated (TIER_REQUESTS
#    synthetic requests shaped as kprof's tiers make them), medians of BENCH_RUNS.
# 5. Rewrites the "Sink throughput" section of bench/RESULTS.md.
# Exit status: 0 unless a run failed or miscounted (a missed target is not a failure).
set -euo pipefail
trap 'echo "bench: FAILED (see above)" >&2' ERR

B=${B:-_build}
SINK=${SINK:-erlang/priv/kprof_sink}
RUNS=${BENCH_RUNS:-5}
MSGS=${BENCH_MSGS:-5000000}
CC=${CC:-cc}
TARGET_RATE=10000000
TARGET_RATIO=50
D=$B/bench
STREAM=$D/stream.bin
COUNT_FILE=$D/stream.count
RESULTS=bench/RESULTS.md

mkdir -p "$D"
if [ ! -s "$STREAM" ] || [ ! -s "$COUNT_FILE" ]; then
  echo "bench: recording $STREAM (>= $MSGS messages, once)"
  ERL_CRASH_DUMP=$D/erl_crash.dump escript bench/gen_stream.erl --messages "$MSGS" "$STREAM"
fi
[ "${1:-}" = "--stream-only" ] && exit 0

N=$(cat "$COUNT_FILE")
BYTES=$(stat -c %s "$STREAM")
if [ "$N" -lt "$MSGS" ]; then
  echo "bench: FAIL: $STREAM has $N messages, fewer than $MSGS (delete it to record again)" >&2
  exit 1
fi

REPLAY=$D/replay
FRAME_ONLY=$D/frame_only
LOG=$D/runs.txt
: > "$LOG"

field() { # field NAME LINE
  sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< "$2"
}

run_frame() {
  "$REPLAY" --expect "$N" --label frame_only "$STREAM" -- "$FRAME_ONLY"
}
run_sink() {
  "$REPLAY" --expect "$N" --stats --label kprof_sink "$STREAM" -- "$SINK"
}

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench: $N messages, $((BYTES / 1000000)) MB; $RUNS runs each, interleaved (+1 warm-up); load $LOAD"
if awk -v l="${LOAD%% *}" 'BEGIN { exit !(l > 0.5) }'; then
  echo "bench: warning: load average $LOAD before the runs: other processes share the $(nproc) cores," \
       "wall-clock rates will come out low (CPU ns/msg much less so)" >&2
fi
run_frame > /dev/null
run_sink > /dev/null
for r in $(seq 1 "$RUNS"); do
  f=$(run_frame)
  s=$(run_sink)
  echo "$f" >> "$LOG"
  echo "$s" >> "$LOG"
  printf '  run %d: frame_only %.3f s, kprof_sink %.3f s\n' "$r" "$(field secs "$f")" "$(field secs "$s")"
done
SINK_LINE=$s

commas() { # 12345678 -> 12,345,678
  sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta' <<< "$1"
}
median() { # the median of the numbers on stdin
  sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
col() { # col LABEL FIELD: that field of every run of LABEL
  grep "label=$1 " "$LOG" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"
}

F_SECS=$(col frame_only secs | median)
S_SECS=$(col kprof_sink secs | median)
F_CPU=$(paste <(col frame_only user) <(col frame_only sys) | awk '{ print $1 + $2 }' | median)
S_CPU=$(paste <(col kprof_sink user) <(col kprof_sink sys) | awk '{ print $1 + $2 }' | median)
IN_LINE=$("$REPLAY" --expect "$N" --inproc "$STREAM")
I_SECS=$(field secs "$IN_LINE")

# The sink's work by mode, in one process.
TIER_REQUESTS=${TIER_REQUESTS:-500000}
MODES_OUT=$("$D/sink_modes" "$STREAM" "$TIER_REQUESTS" "$RUNS")
mode_field() { # mode_field MODE FIELD
  grep "mode=$1 " <<< "$MODES_OUT" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"
}
M_LIMIT=$(mode_field framing_only rate)
P_LIMIT=$(awk -v n="$N" -v s="$F_SECS" 'BEGIN { printf "%.0f", n / s }')
MODES_TABLE=$(for m in framing_only decoded flame_stacks tier_aggregated; do
  awk -v m="$m" -v n="$(mode_field "$m" msgs)" -v s="$(mode_field "$m" secs)" \
      -v r="$(mode_field "$m" rate)" -v lim="$M_LIMIT" -v plim="$P_LIMIT" -v t="$TARGET_RATE" \
      -v tr="$TARGET_RATIO" '
    BEGIN {
      name["framing_only"] = "framing only, in process"; name["decoded"] = "decoded"
      name["flame_stacks"] = "flame stacks, every process"; name["tier_aggregated"] = "tier-aggregated requests"
      v = (m == "framing_only") ? "-" : sprintf("%s, %s", (r >= t) ? "PASS" : "FAIL", (100 * r / plim >= tr) ? "PASS" : "FAIL")
      printf "| %-28s | %9d | %8.3f | %12.0f | %7.1f %% | %7.1f %% | %-10s |\n", name[m], n, s, r,
             100 * r / plim, 100 * r / lim, v
    }'
done)

# CPU time of the sink alone, from the kernel's task clock (perf is the child; it execs the sink).
# Instructions and cycles per message (user space) too, when the CPU counters are there:
# unlike times, they hardly move with other load on the machine.
PERF_NS=""
PERF_HW=""
if command -v perf > /dev/null 2>&1 && perf stat -e task-clock -x, -o /dev/null true > /dev/null 2>&1; then
  EVENTS=task-clock
  perf stat -e instructions:u,cycles:u -x, -o /dev/null true > /dev/null 2>&1 &&
    EVENTS=task-clock,instructions:u,cycles:u
  "$REPLAY" --expect "$N" --stats --label perf "$STREAM" -- \
    perf stat -e "$EVENTS" -x, -o "$D/perf-stat.csv" "$SINK" > /dev/null
  MSEC=$(awk -F, '$3 ~ /task-clock/ { print $1 }' "$D/perf-stat.csv")
  [ -n "$MSEC" ] && PERF_NS=$(awk -v m="$MSEC" -v n="$N" 'BEGIN { print m * 1e6 / n }')
  PERF_HW=$(awk -F, -v n="$N" '$3 ~ /^instructions/ && $1 ~ /^[0-9]+$/ { i = $1 }
                                $3 ~ /^cycles/ && $1 ~ /^[0-9]+$/ { c = $1 }
    END { if (i && c) printf "%.0f instructions and %.0f cycles per message (user space, IPC %.2f)", i / n, c / n, i / c }' \
    "$D/perf-stat.csv")
fi

TABLE=$(awk -v n="$N" -v b="$BYTES" -v fs="$F_SECS" -v ss="$S_SECS" -v is="$I_SECS" \
            -v fc="$F_CPU" -v sc="$S_CPU" '
  function row(name, secs, cpu) {
    printf "| %-28s | %9d | %7.1f | %8.3f | %12.0f | %8.0f | %10s |\n",
           name, n, b / 1e6, secs, n / secs, b / 1e6 / secs,
           cpu == "" ? "-" : sprintf("%.1f", cpu * 1e9 / n)
  }
  BEGIN {
    print "| reader                       |      msgs |      MB | time (s) |       msgs/s |     MB/s | CPU ns/msg |"
    print "|------------------------------|----------:|--------:|---------:|-------------:|---------:|-----------:|"
    row("framing only, through a pipe", fs, fc)
    row("kprof_sink, through a pipe", ss, sc)
    row("framing only, in process", is, "")
  }')
RATE=$(awk -v n="$N" -v s="$S_SECS" 'BEGIN { printf "%.0f", n / s }')
FRATE=$(awk -v n="$N" -v s="$F_SECS" 'BEGIN { printf "%.0f", n / s }')
RATIO=$(awk -v a="$RATE" -v b="$FRATE" 'BEGIN { printf "%.1f", 100 * a / b }')
V1=$(awk -v r="$RATE" -v t="$TARGET_RATE" 'BEGIN { print (r >= t) ? "PASS" : "FAIL" }')
V2=$(awk -v r="$RATIO" -v t="$TARGET_RATIO" 'BEGIN { print (r >= t) ? "PASS" : "FAIL" }')
SINK_NS=$(awk -v c="$S_CPU" -v n="$N" 'BEGIN { printf "%.1f", c * 1e9 / n }')
CPU_RATE=$(awk -v c="$S_CPU" -v n="$N" 'BEGIN { printf "%.0f", n / c }')
V3=$(awk -v r="$CPU_RATE" -v t="$TARGET_RATE" 'BEGIN { print (r >= t) ? "PASS" : "FAIL" }')
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

MIX=$(for k in call return_from return_to exception_from in out spawn spawned exit link unlink \
                getting_linked getting_unlinked; do
        v=$(field "ev_$k" "$SINK_LINE")
        [ -n "$v" ] && awk -v k="$k" -v v="$v" -v n="$N" 'BEGIN { printf "%s %.1f%%, ", k, 100 * v / n }'
      done | sed 's/, $//')

SUMMARY=$(cat <<EOF
$TABLE

Medians of $RUNS interleaved runs (after one warm-up run of each); time from the first
write into the pipe to the reader's exit. CPU ns/msg is the reader's user+sys time
(wait4 rusage) per message.

- kprof_sink decoded: $(commas "$RATE") msgs/s (target >= $(commas $TARGET_RATE)): **$V1**
- sink / framing-only: $RATIO % (target >= $TARGET_RATIO %): **$V2**
- sink CPU per message: $SINK_NS ns (rusage user+sys)$( [ -n "$PERF_NS" ] && printf '; %.1f ns (perf stat task-clock, one more run)' "$PERF_NS")
$( [ -n "$PERF_HW" ] && echo "- sink: $PERF_HW" )
- the same target on the sink's CPU time (msgs / its user+sys seconds, less sensitive to other
  load): $(commas "$CPU_RATE") msgs/s: **$V3**
- load average before / after the runs: $LOAD / $LOAD_END
- every run saw all $N messages (frame_only's frame count; kprof_sink's stats:
  trace_events = $N, decode_errors = unknown = dropped = 0)

The sink's work by mode, in one process (bench/sink_modes.c: ks_sink_feed as main.c feeds
what it reads, no pipe), medians of $RUNS runs. Decoded and flame stacks: the stream above
(flame: one capture of every process in it, stacks and call-path tree built from every
event). Tier-aggregated: $TIER_REQUESTS synthetic requests of 10 events in two processes, as
kprof's tiers send them (markers, labels, three tiers, four identities), each walked and
aggregated into histograms. Targets: >= $(commas $TARGET_RATE) msgs/s, and >= $TARGET_RATIO % of the
framing-only reader through a pipe above (the limit the sink meets: $(commas "$P_LIMIT") msgs/s);
framing in process, with no reader at all, for scale.

| mode                         |      msgs | time (s) |       msgs/s | of pipe reader | of in-process framing | targets |
|------------------------------|----------:|---------:|-------------:|---------:|---------:|------------|
$MODES_TABLE
EOF
)
echo
echo "$SUMMARY"

# bench/RESULTS.md: this run replaces the "Sink throughput" section, the rest stays.
MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
OTP=$(erl -noshell -eval '{ok, V} = file:read_file(filename:join([code:root_dir(), "releases",
        erlang:system_info(otp_release), "OTP_VERSION"])), io:format("~s", [string:trim(V)]), halt().' \
      2>/dev/null || echo "?")
ERTS=$(erl -noshell -eval 'io:format("~s", [erlang:system_info(version)]), halt().' 2>/dev/null || echo "?")
SECTION=$(mktemp)
{
  echo "## Sink throughput"
  echo
  echo "\`make bench\` on $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores, ${MODEL:-unknown CPU};"
  echo "Linux $(uname -r); OTP $OTP (erts $ERTS); $($CC --version 2>/dev/null | head -1) ${CFLAGS:-}; pipe-max-size $(cat /proc/sys/fs/pipe-max-size)."
  echo
  echo "Stream: $B/bench/stream.bin, $N messages, $((BYTES / 1000000)) MB, recorded from a real traced"
  echo "workload by bench/gen_stream.erl ([call, arity, return_to, monotonic_timestamp, running,"
  echo "procs], return_trace):"
  echo "$MIX." | fold -s -w 92 | sed 's/ *$//'
  echo
  echo "$SUMMARY"
  echo
} > "$SECTION"
if [ -f "$RESULTS" ]; then
  awk -v sec="$SECTION" '
    /^## / { if (skip) skip = 0 }
    /^## Sink throughput/ { while ((getline l < sec) > 0) print l; skip = 1; done = 1; next }
    !skip { print }
    END { if (!done) { print ""; while ((getline l < sec) > 0) print l } }' "$RESULTS" > "$RESULTS.tmp"
  mv "$RESULTS.tmp" "$RESULTS"
else
  { echo "# kprof benchmark results"; echo; cat "$SECTION"; } > "$RESULTS"
fi
rm -f "$SECTION"
echo
echo "bench: wrote the \"Sink throughput\" section of $RESULTS"
