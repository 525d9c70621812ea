/* ks_options.h: every option of every mode and every output format, ONE table.
 *
 * An X-macro list, no include guard: the includer defines KS_OPTION, KS_FIELD
 * and KS_FORMAT, includes this file, and undefines them (port/proto/options.c,
 * port/proto/ks_option_fields.h for port/callpath/graph.c,
 * port/tiers/tier_opts.c and port/sample/sample_control.c,
 * port/write/ks_write.h, port/write/files.c).
 * scripts/gen_options.escript reads the same lines and writes
 * erlang/include/kprof_options.hrl (kprof_opts.erl); `make' rebuilds it when
 * this file changes. So each line must stay on one line, in this shape:
 *
 *   KS_OPTION(MODES, key, TYPE, MIN, MAX, "DEFAULT", CHECKED_BY, FIELD, "doc")
 *     MODES       KS_M_TIERS, KS_M_FLAME, KS_M_SAMPLE, KS_M_GUARD, KS_M_CALLS joined
 *                 with |: the modes
 *                 whose options (Erlang side) or start command (sink side) take it
 *     TYPE        KS_T_INT  integer in [MIN, MAX]
 *                 KS_T_NUMX number (integer or float) in ]MIN, MAX]
 *                 KS_T_NUM  number in [MIN, MAX]
 *                 KS_T_INTINF integer in [MIN, MAX] or the atom infinity
 *                 KS_T_BOOL true | false (MIN, MAX: 0, 1)
 *                 KS_T_ENUM one of the atoms of the key's KS_VALUE lines (MIN, MAX: 0, 0)
 *                 KS_T_TERM anything else: checked by the key's own handler
 *                 (kprof_opts:check/2 through its valid_term, the sink's decoder); MIN, MAX: 0, 0
 *     MIN, MAX    integer or decimal literals, `N << M', or KS_INF / -KS_INF
 *     "DEFAULT"   the default as an Erlang term's text ("256", "all", "\".\"");
 *                 "" when there is none (the option is off unless given)
 *     CHECKED_BY  KS_BY_ERLANG: a user's option, checked by kprof only;
 *                 KS_BY_SINK: what kprof sends the sink, checked there only;
 *                 KS_BY_BOTH: the same key on both sides, same bounds
 *     FIELD       KS_FIELD(feature, member, scale): where the sink stores an integer
 *                 or boolean row, member of the feature's options struct (tiers:
 *                 ks_tier_opts, flame: ks_fopts, sample: port/sample/sample_control.c's,
 *                 which holds a ks_fopts for the flame rows), value times scale
 *                 (grace_ms into grace_ns: 1000000); its default is the DEFAULT above
 *                 (ks_option_defaults). KS_NO_FIELD: the sink does not store it,
 *                 or a KS_T_TERM row the feature's own decoder takes; a KS_T_TERM
 *                 row's field is where that decoder stores it (an MFA id: trigger)
 *   KS_FORMAT(name, "ext", writer, ALL)   a flame output format, its file
 *                 extension (a prefix when it ends in `.': callgrind.out.Base,
 *                 the name KCachegrind looks for), the function of port/write/
 *                 that writes it (its prototype is made from this
 *                 line, in port/write/ks_write.h) and ALL, 1 when
 *                 `output_format => all' writes it (0: only when named);
 *                 the order is the order of the format bits (KS_FMT_name).
 *                 doc/flame.md, "The formats", says what each file holds.
 *   KS_VALUE(key, atom, value)   a value of the KS_T_ENUM rows of key: the atom a
 *                 user gives and the number the sink stores in the row's field (the
 *                 model's own constant: KS_GROUP_* in port/callpath/ks_callpath.h)
 *   KS_REPLAY(key, "flag", how)  an option of kprof:replay/2 and of
 *                 `kprof_sink --replay' (--flag): a flame row's key, how the sink takes
 *                 it: KS_R_OVERRIDE, its value replaces the recorded one (an integer,
 *                 boolean or enum row with a field: decoded, bounded and applied by
 *                 the table's loop, port/record/replay_opts.c); KS_R_DIR, KS_R_NAME,
 *                 KS_R_FORMATS, where and as what the files are written; KS_R_ERLANG,
 *                 kprof's alone (flag ""), never sent to the sink
 *   KS_RECORD_KEY(id, key)       a key of a recording's header
 *                 (doc/internals-record.md): the flame row key's field, under the
 *                 number id in the file. Never renumber or reuse an id: the files
 *                 written before must read (test/data/flame_v1.kprec)
 * The includer defines the kinds it reads; one it leaves undefined expands to
 * nothing here.
 *
 * Adding an option: one line here, then the code that uses it (the decode,
 * the default and the key kprof sends come from the line): CONTRIBUTING.md,
 * "Add an option".
 */

#ifndef KS_VALUE
#define KS_VALUE(key, atom, value)
#define KS_OPTIONS_NO_VALUE
#endif
#ifndef KS_REPLAY
#define KS_REPLAY(key, flag, how)
#define KS_OPTIONS_NO_REPLAY
#endif
#ifndef KS_RECORD_KEY
#define KS_RECORD_KEY(id, key)
#define KS_OPTIONS_NO_RECORD_KEY
#endif

/* tiers: kprof:start_tiers/2's options (Erlang; kprof_tiers_plan:check/2) */
KS_OPTION(KS_M_TIERS, sample, KS_T_NUMX, 0, 1, "1.0", KS_BY_ERLANG, KS_NO_FIELD, "fraction of kprof:request/2 and set_token/1 calls traced")
KS_OPTION(KS_M_TIERS, max_overhead, KS_T_NUMX, 0, 1, "", KS_BY_ERLANG, KS_NO_FIELD, "lower sample while tracing's estimated share of the node's CPU is above this (off when absent)")
KS_OPTION(KS_M_TIERS, slow_ms, KS_T_NUM, 0, KS_INF, "", KS_BY_ERLANG, KS_NO_FIELD, "requests at least this slow are reported one by one (off when absent)")
KS_OPTION(KS_M_TIERS, slow_max, KS_T_INT, 0, 10000, "20", KS_BY_BOTH, KS_FIELD(tiers, slow_max, 1), "how many slow requests are kept")
KS_OPTION(KS_M_TIERS, window, KS_T_NUM, 0.1, 86400, "", KS_BY_ERLANG, KS_NO_FIELD, "report only the last window seconds (off when absent)")
KS_OPTION(KS_M_TIERS, entry, KS_T_TERM, 0, 0, "", KS_BY_ERLANG, KS_NO_FIELD, "an MFA spec or a list of them whose calls open a request")
KS_OPTION(KS_M_TIERS, identity, KS_T_TERM, 0, 0, "", KS_BY_ERLANG, KS_NO_FIELD, "an entry call's identity: mfa | {arg, N} | fun/1 | {ms, MatchSpec} (needs entry)")
KS_OPTION(KS_M_TIERS, nodes, KS_T_TERM, 0, 0, "", KS_BY_ERLANG, KS_NO_FIELD, "the nodes to start on, all or none (default [node()])")
KS_OPTION(KS_M_TIERS, max_identities, KS_T_INT, 1, 100000, "200", KS_BY_BOTH, KS_FIELD(tiers, max_identities, 1), "distinct request identities aggregated")
KS_OPTION(KS_M_TIERS, max_inflight, KS_T_INT, 1, 10000000, "20000", KS_BY_BOTH, KS_FIELD(tiers, max_inflight, 1), "requests open at once")
KS_OPTION(KS_M_TIERS, max_request_events, KS_T_INT, 1, 100000000, "20000", KS_BY_BOTH, KS_FIELD(tiers, max_request_events, 1), "events of one request")
KS_OPTION(KS_M_TIERS, grace_ms, KS_T_INT, 0, 3600000, "100", KS_BY_BOTH, KS_FIELD(tiers, grace_ns, 1000000), "how long a finished request waits for late events")
KS_OPTION(KS_M_TIERS, full_trace, KS_T_TERM, 0, 0, "false", KS_BY_BOTH, KS_NO_FIELD, "Identity | [Identity] | all: trace every function for these requests")
KS_OPTION(KS_M_TIERS, full_trace_max_events, KS_T_INT, 1, 100000000, "100000", KS_BY_ERLANG, KS_NO_FIELD, "full trace: events per request (sent as full_max_events)")
KS_OPTION(KS_M_TIERS, full_trace_max_nodes, KS_T_INT, 16, 1 << 26, "100000", KS_BY_ERLANG, KS_NO_FIELD, "full trace: call paths per identity (sent as full_max_nodes)")
KS_OPTION(KS_M_TIERS, full_trace_max_identities, KS_T_INT, 1, 100000, "20", KS_BY_ERLANG, KS_NO_FIELD, "full trace: identities (sent as full_max_identities)")
/* tiers: what kprof_tiers sends the sink in {tiers_start, Specs, Opts} */
KS_OPTION(KS_M_TIERS, max_request_ms, KS_T_INT, 1, 86400000, "60000", KS_BY_BOTH, KS_FIELD(tiers, max_age_ns, 1000000), "an open request older than this is abandoned")
KS_OPTION(KS_M_TIERS, slow_us, KS_T_INT, 0, KS_INF, "", KS_BY_SINK, KS_FIELD(tiers, slow_ns, 1000), "slow_ms in microseconds")
KS_OPTION(KS_M_TIERS, full_max_events, KS_T_INT, 1, 100000000, "100000", KS_BY_SINK, KS_FIELD(tiers, full_max_events, 1), "full_trace_max_events")
KS_OPTION(KS_M_TIERS, full_max_nodes, KS_T_INT, 16, 1 << 26, "100000", KS_BY_SINK, KS_FIELD(tiers, full_max_nodes, 1), "full_trace_max_nodes")
KS_OPTION(KS_M_TIERS, full_max_identities, KS_T_INT, 1, 100000, "20", KS_BY_SINK, KS_FIELD(tiers, full_max_identities, 1), "full_trace_max_identities")

/* flame: flame_apply, flame_capture, flame_pid and the web captures (kprof_flame_options:validate/2) */
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, output_format, KS_T_TERM, 0, 0, "all", KS_BY_ERLANG, KS_NO_FIELD, "a format, a list of them, or all")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, output_directory, KS_T_TERM, 0, 0, "\".\"", KS_BY_ERLANG, KS_NO_FIELD, "where the files go")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, name, KS_T_TERM, 0, 0, "", KS_BY_ERLANG, KS_NO_FIELD, "the files' base name (default kprof-Mode-Time-Id)")
KS_OPTION(KS_M_FLAME, sleep, KS_T_BOOL, 0, 1, "true", KS_BY_BOTH, KS_FIELD(flame, sleep, 1), "SLEEP frames")
KS_OPTION(KS_M_FLAME, gc, KS_T_BOOL, 0, 1, "true", KS_BY_BOTH, KS_FIELD(flame, gc, 1), "GC frames")
KS_OPTION(KS_M_FLAME, children, KS_T_BOOL, 0, 1, "false", KS_BY_BOTH, KS_FIELD(flame, children, 1), "follow spawned processes (flame_apply: true unless given false)")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, max_bytes, KS_T_INT, 1 << 16, 1099511627776, "2147483648", KS_BY_BOTH, KS_FIELD(flame, max_bytes, 1), "memory of the call-path tree; paths past it go to OVER_BUDGET frames")
KS_OPTION(KS_M_FLAME, perf_period_us, KS_T_INT, 0, 60000000, "0", KS_BY_BOTH, KS_FIELD(flame, perf_period_us, 1), "perf sample period; 0: automatic")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, max_procs, KS_T_INT, 1, 1 << 22, "100000", KS_BY_BOTH, KS_FIELD(flame, max_procs, 1), "processes of one capture; more are left out, counted in dropped_procs")
KS_OPTION(KS_M_FLAME, timeout, KS_T_INTINF, 0, KS_INF, "30000", KS_BY_ERLANG, KS_NO_FIELD, "flame_capture's wait (ms)")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, open, KS_T_TERM, 0, 0, "false", KS_BY_ERLANG, KS_NO_FIELD, "speedscope | browser | false: open the result in the speedscope CLI, or the SVG in $BROWSER or xdg-open")
KS_OPTION(KS_M_FLAME, progress, KS_T_TERM, 0, 0, "true", KS_BY_ERLANG, KS_NO_FIELD, "true | false | Ms: a progress line to the caller's group leader every Ms (true: 5000) while the capture runs")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, names, KS_T_ENUM, 0, 0, "erlang", KS_BY_BOTH, KS_FIELD(flame, elixir_names, 1), "functions named lists:seq/2, or Enum.sum/1 and :lists.seq/2, in the files and the top table")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, top, KS_T_INT, 0, 100000, "0", KS_BY_BOTH, KS_FIELD(flame, top, 1), "print the N functions with the most self time after the capture, and return them")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, top_by, KS_T_ENUM, 0, 0, "self", KS_BY_BOTH, KS_FIELD(flame, top_by, 1), "the order of the top table (and which N it keeps): most self time, inclusive time or calls first")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, info, KS_T_BOOL, 0, 1, "false", KS_BY_ERLANG, KS_NO_FIELD, "return the capture's summary (kprof_flame_summary) after its files, the top table in it")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, group, KS_T_ENUM, 0, 0, "", KS_BY_BOTH, KS_FIELD(flame, group, 1), "processes merged at the root (default initial_call with children => true, else pid)")
KS_OPTION(KS_M_FLAME | KS_M_SAMPLE, fold_recursion, KS_T_BOOL, 0, 1, "false", KS_BY_BOTH, KS_FIELD(flame, fold_recursion, 1), "direct recursion f;f;f written as one f")
KS_OPTION(KS_M_FLAME, callers, KS_T_BOOL, 0, 1, "false", KS_BY_BOTH, KS_FIELD(flame, callers, 1), "trace each call's caller: the BEAM's own stacks (tail calls replace their caller), at a higher cost per call")
KS_OPTION(KS_M_FLAME, correct, KS_T_BOOL, 0, 1, "true", KS_BY_ERLANG, KS_NO_FIELD, "take tracing's cost per event (measured on this machine, kprof:flame_calibrate/0) off every time")
KS_OPTION(KS_M_FLAME, record, KS_T_TERM, 0, 0, "", KS_BY_BOTH, KS_NO_FIELD, "also write the capture's event stream to this file (absolute; replayed by kprof:replay/2)")
KS_OPTION(KS_M_FLAME, max_record_bytes, KS_T_INT, 4096, 1099511627776, "1073741824", KS_BY_BOTH, KS_FIELD(flame, max_record_bytes, 1), "bytes of one record file; past them the recording stops, or rotates")
KS_OPTION(KS_M_FLAME, record_rotate, KS_T_INT, 0, 1000, "0", KS_BY_BOTH, KS_FIELD(flame, record_rotate, 1), "past max_record_bytes: 0 stops recording, N starts a new file keeping N old ones")
KS_OPTION(KS_M_FLAME, record_level, KS_T_INT, 1, 19, "1", KS_BY_BOTH, KS_FIELD(flame, record_level, 1), "the recording's zstd level: 1 the fastest, up to 19 smaller files for more of the sink's CPU")
/* flame: what kprof_flame_srv sends the sink in {flame_start, Id, Opts} */
KS_OPTION(KS_M_FLAME, hold, KS_T_BOOL, 0, 1, "false", KS_BY_SINK, KS_FIELD(flame, hold, 1), "count trigger calls only after flame_arm")
KS_OPTION(KS_M_FLAME, max_stack, KS_T_INT, 1, 1 << 24, "65536", KS_BY_SINK, KS_FIELD(flame, max_stack, 1), "frames on one process's stack")
KS_OPTION(KS_M_FLAME, ncalls, KS_T_INT, 1, 4294967295, "", KS_BY_SINK, KS_FIELD(flame, ncalls, 1), "trigger calls captured")
KS_OPTION(KS_M_FLAME, trigger, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_FIELD(flame, trigger, 1), "{M, F, Arity} whose calls are captured")
KS_OPTION(KS_M_FLAME, hide, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_FIELD(flame, hide, 1), "{M, F, Arity} whose frame is left out")
KS_OPTION(KS_M_FLAME, time_offset, KS_T_INT, -KS_INF, KS_INF, "0", KS_BY_SINK, KS_FIELD(flame, time_offset, 1), "erlang:time_offset(nanosecond)")
KS_OPTION(KS_M_FLAME, correct_ns, KS_T_INT, 0, 100000, "0", KS_BY_SINK, KS_FIELD(flame, correct_ns, 1), "tracing's cost per event, taken off the time before each event (0: none)")

/* sample: kprof:sample/2's options (Erlang); the flame rows above marked KS_M_SAMPLE too */
KS_OPTION(KS_M_SAMPLE, frequency, KS_T_INT, 1, 10000, "97", KS_BY_ERLANG, KS_NO_FIELD, "samples a second of each scheduler thread's CPU time (sent as hz; cost: doc/sampling.md)")
KS_OPTION(KS_M_SAMPLE, pid, KS_T_TERM, 0, 0, "", KS_BY_ERLANG, KS_NO_FIELD, "Pid | [Pid] | all: keep only these processes' samples (default all: every process)")
KS_OPTION(KS_M_SAMPLE, raw_record, KS_T_TERM, 0, 0, "", KS_BY_BOTH, KS_NO_FIELD, "also write what the sampler read from the VM to this file (absolute; bug reports, test recordings)")
/* sample: what kprof_sample sends the sink in {sample_start, Id, Opts} */
KS_OPTION(KS_M_SAMPLE, hz, KS_T_INT, 1, 10000, "97", KS_BY_SINK, KS_FIELD(sample, hz, 1), "frequency")
KS_OPTION(KS_M_SAMPLE, os_pid, KS_T_INT, 1, 4194304, "", KS_BY_SINK, KS_FIELD(sample, os_pid, 1), "the VM's OS process (os:getpid())")
KS_OPTION(KS_M_SAMPLE, pid_template, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_NO_FIELD, "a pid of the node (self()): its node name and creation")
KS_OPTION(KS_M_SAMPLE, pid_bits, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_NO_FIELD, "{NumberBits, SerialBits} of the node's pids (what list_to_pid/1 takes)")
KS_OPTION(KS_M_SAMPLE, layout, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_NO_FIELD, "{Offset, Shift}: where the running process's pid is, calibrated before")
KS_OPTION(KS_M_SAMPLE, beacons, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_NO_FIELD, "[Pid]: busy processes to calibrate the layout with (without layout)")
KS_OPTION(KS_M_SAMPLE, pids, KS_T_TERM, 0, 0, "", KS_BY_SINK, KS_NO_FIELD, "[Pid]: pid")

/* calls: kprof_calls:run/2's options (Erlang); ms and max not both infinity */
KS_OPTION(KS_M_CALLS, ms, KS_T_INTINF, 1, KS_INF, "5000", KS_BY_ERLANG, KS_NO_FIELD, "stop counting after this many ms (or at max calls)")
KS_OPTION(KS_M_CALLS, max, KS_T_INTINF, 1, KS_INF, "100000", KS_BY_ERLANG, KS_NO_FIELD, "stop counting after this many calls in all (or at ms)")
KS_OPTION(KS_M_CALLS, time, KS_T_BOOL, 0, 1, "false", KS_BY_ERLANG, KS_NO_FIELD, "per function time too (the VM's call_time)")
KS_OPTION(KS_M_CALLS, print, KS_T_BOOL, 0, 1, "true", KS_BY_ERLANG, KS_NO_FIELD, "print the table to the caller's group leader")
KS_OPTION(KS_M_CALLS, top, KS_T_INT, 0, KS_INF, "20", KS_BY_ERLANG, KS_NO_FIELD, "rows printed (all are returned)")
KS_OPTION(KS_M_CALLS, names, KS_T_ENUM, 0, 0, "erlang", KS_BY_ERLANG, KS_NO_FIELD, "functions named lists:seq/2, or Enum.sum/1 and :lists.seq/2, in the table")

/* guard: kprof_guard's limits, taken by the tiers, the flame modes and calls too */
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_lag_ms, KS_T_INTINF, 1, KS_INF, "1000", KS_BY_ERLANG, KS_NO_FIELD, "abort when the sink lags this far behind")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_stall_ms, KS_T_INTINF, 1, KS_INF, "500", KS_BY_ERLANG, KS_NO_FIELD, "abort when the sink stops reading this long")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_queue_bytes, KS_T_INTINF, 1, KS_INF, "4194304", KS_BY_ERLANG, KS_NO_FIELD, "abort past this many bytes queued to the sink")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_memory_bytes, KS_T_TERM, 0, 0, "default", KS_BY_ERLANG, KS_NO_FIELD, "abort past this much node memory, erlang:memory(total): bytes | infinity | default (at arming + 1 GiB)")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_events, KS_T_INTINF, 1, KS_INF, "infinity", KS_BY_ERLANG, KS_NO_FIELD, "abort past this many events")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, rate, KS_T_TERM, 0, 0, "infinity", KS_BY_ERLANG, KS_NO_FIELD, "{Max, PerMs} | infinity: abort past this event rate")
KS_OPTION(KS_M_GUARD | KS_M_TIERS | KS_M_FLAME | KS_M_SAMPLE | KS_M_CALLS, max_seconds, KS_T_INTINF, 1, KS_INF, "infinity", KS_BY_ERLANG, KS_NO_FIELD, "abort after this long")

KS_FORMAT(folded, ".folded", ks_write_folded, 1)
KS_FORMAT(perf, ".perf", ks_write_perf, 1)
KS_FORMAT(speedscope, ".speedscope.json", ks_write_speedscope, 1)
KS_FORMAT(svg, ".svg", ks_write_svg, 1)
KS_FORMAT(callgrind, "callgrind.out.", ks_write_callgrind, 1)
KS_FORMAT(folded_calls, ".calls.folded", ks_write_folded_calls, 0)
KS_FORMAT(flat, ".flat.tsv", ks_write_flat, 0)

/* The values of the enum rows (KS_T_ENUM). */
KS_VALUE(group, pid, 0)
KS_VALUE(group, name, 1)
KS_VALUE(group, initial_call, 2)
KS_VALUE(group, all, 3)
KS_VALUE(names, erlang, 0)
KS_VALUE(names, elixir, 1)
KS_VALUE(top_by, self, 0)
KS_VALUE(top_by, inclusive, 1)
KS_VALUE(top_by, calls, 2)

/* kprof:replay/2's options and kprof_sink --replay's flags, in the usage line's order. */
KS_REPLAY(output_directory, "out", KS_R_DIR)
KS_REPLAY(name, "name", KS_R_NAME)
KS_REPLAY(output_format, "format", KS_R_FORMATS)
KS_REPLAY(group, "group", KS_R_OVERRIDE)
KS_REPLAY(fold_recursion, "fold-recursion", KS_R_OVERRIDE)
KS_REPLAY(names, "names", KS_R_OVERRIDE)
KS_REPLAY(top, "top", KS_R_OVERRIDE)
KS_REPLAY(max_bytes, "max-bytes", KS_R_OVERRIDE)
KS_REPLAY(sleep, "sleep", KS_R_OVERRIDE)
KS_REPLAY(info, "", KS_R_ERLANG)

/* A recording's header: the options that shape its replay, in the order written. */
KS_RECORD_KEY(1, sleep)
KS_RECORD_KEY(2, gc)
KS_RECORD_KEY(3, children)
KS_RECORD_KEY(4, max_bytes)
KS_RECORD_KEY(5, max_stack)
KS_RECORD_KEY(6, max_procs)
KS_RECORD_KEY(7, ncalls)
KS_RECORD_KEY(8, hold)
KS_RECORD_KEY(9, time_offset)
KS_RECORD_KEY(10, perf_period_us)
KS_RECORD_KEY(11, top)
KS_RECORD_KEY(12, names)
KS_RECORD_KEY(13, group)
KS_RECORD_KEY(14, fold_recursion)
KS_RECORD_KEY(15, callers)
KS_RECORD_KEY(16, correct_ns)
KS_RECORD_KEY(17, trigger)
KS_RECORD_KEY(18, hide)

#ifdef KS_OPTIONS_NO_VALUE
#undef KS_VALUE
#undef KS_OPTIONS_NO_VALUE
#endif
#ifdef KS_OPTIONS_NO_REPLAY
#undef KS_REPLAY
#undef KS_OPTIONS_NO_REPLAY
#endif
#ifdef KS_OPTIONS_NO_RECORD_KEY
#undef KS_RECORD_KEY
#undef KS_OPTIONS_NO_RECORD_KEY
#endif
