# Sink throughput benchmark (included by the top-level Makefile).
#   make bench                    all of them: bench-sink, bench-overhead, bench-aggregator,
#                                 bench-tiers, bench-flame, bench-flame-real, bench-record (below)
#   make bench-sink               replays a recorded stream of >= 5 M real trace messages
#                                 into a framing-only reader and into kprof_sink, 5 runs each
#   make bench-overhead           cost per event in the traced process, tracer by tracer,
#                                 beside a null NIF tracer (the VM's dispatch floor)
#   make bench-nif-instructions   instructions per traced call by callgrind (OTP 26+)
#   make bench-ir                 the sink's instructions per event by callgrind (bench/ir.sh):
#                                 sink_modes on the stream, flame_sink on the compile recording
#   make bench-ring               a record's cost to its writer, 1 and 2 writers on cores of
#                                 their own: the shared ring of format 3 against rings per
#                                 writer, and the projection to 8, 32, 128 busy schedulers
#   make bench-flame              flame captures of 1 M and 10 M events; call to file for
#                                 kprof (ring, port) and an in-VM baseline (eflame's design)
#   make bench BENCH_RUNS=9       more runs
#   make bench-stream             only (re)generate the stream if it is missing
# The stream is recorded once from a real traced workload by bench/gen_stream.erl into
# $(B)/bench/stream.bin (+ stream.count) and reused; delete it to record a new one.
# Results go to stdout and to the "Sink throughput" section of bench/RESULTS.md.
BENCH_DIR    := $(B)/bench
BENCH_MSGS   ?= 5000000
BENCH_RUNS   ?= 5
BENCH_BINS   := $(BENCH_DIR)/replay $(BENCH_DIR)/frame_only $(BENCH_DIR)/sink_modes

.PHONY: bench bench-sink bench-stream bench-overhead bench-ring bench-nif-instructions \
        bench-aggregator bench-flame
# Every benchmark, one after the other; each rewrites its section of bench/RESULTS.md.
bench: bench-sink bench-overhead bench-ring bench-aggregator bench-tiers bench-tiers-event bench-flame bench-flame-real bench-record

bench-sink: $(SINK) $(BENCH_BINS)
	CC=$(CC) CFLAGS="$(CFLAGS)" B=$(B) SINK=$(SINK) BENCH_MSGS=$(BENCH_MSGS) BENCH_RUNS=$(BENCH_RUNS) bench/run.sh

bench-stream:
	B=$(B) BENCH_MSGS=$(BENCH_MSGS) bench/run.sh --stream-only

$(BENCH_DIR):
	mkdir -p $@

$(BENCH_DIR)/replay: bench/replay.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)

$(BENCH_DIR)/sink_modes: bench/sink_modes.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)

$(BENCH_DIR)/frame_only: bench/frame_only.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a

# What one trace event costs the traced process, tracer by tracer (bench/overhead_bench.erl),
# beside the dispatch floor of a NIF tracer that does nothing (bench/null_tracer*, built
# here into $(BENCH_DIR), never into erlang/priv).
OVERHEAD_CALLS  ?= 200000
OVERHEAD_ROUNDS ?= 3
bench-overhead: $(SINK) $(NIF) erl $(BENCH_DIR)/overhead_bench.beam $(BENCH_DIR)/null_tracer.beam \
                $(BENCH_DIR)/null_tracer.so
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'overhead_bench:main(["$(OVERHEAD_CALLS)", "$(OVERHEAD_ROUNDS)", "bench/RESULTS.md"])'

$(BENCH_DIR)/overhead_bench.beam: bench/overhead_bench.erl | $(BENCH_DIR)
	erlc -o $(BENCH_DIR) $<

$(BENCH_DIR)/null_tracer.beam: bench/null_tracer.erl | $(BENCH_DIR)
	erlc -o $(BENCH_DIR) $<

$(BENCH_DIR)/null_tracer.so: bench/null_tracer_nif.c | $(BENCH_DIR)
	$(CC) $(NIF_CFLAGS) -o $@ $<

# Instructions per traced call by callgrind (bench/nif_instructions.sh; OTP 26 or later).
bench-nif-instructions: $(SINK) $(NIF) erl $(BENCH_DIR)/overhead_bench.beam $(BENCH_DIR)/null_tracer.beam \
                        $(BENCH_DIR)/null_tracer.so
	B=$(B) bench/nif_instructions.sh

# The sink's instructions per event by callgrind (bench/ir.sh): sink_modes' decoded,
# flame_stacks and tier_aggregated on the recorded stream, and flame_sink on the
# compile recording (recorded first when missing, as bench-flame-sink does). Prints;
# bench/RESULTS.md quotes it by hand ("port/ reorganisation: Ir per event before and after").
.PHONY: bench-ir
bench-ir: $(BENCH_DIR)/sink_modes $(BENCH_DIR)/flame_sink $(BENCH_DIR)/flame_real.beam
	B=$(B) BENCH_MSGS=$(BENCH_MSGS) bench/run.sh --stream-only
	mkdir -p $(FLAME_TRACES)
	test -s $(FLAME_TRACES)/compile.trace || erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -run flame_real main record compile $(FLAME_TRACES)/compile.trace
	bench/ir.sh $(BENCH_DIR) $(BENCH_DIR)/stream.bin $(FLAME_TRACES)/compile.trace

# A ring's record against the shared ring of format 3 (bench/ring_bench.c); RING_FLOOR_NS is
# the VM's own cost per event for the projection (bench-overhead's null tracer row).
RING_RECORDS  ?= 1000000
RING_ROUNDS   ?= 7
RING_FLOOR_NS ?= 400
bench-ring: $(BENCH_DIR)/ring_bench $(BENCH_DIR)/overhead_bench.beam
	$(BENCH_DIR)/ring_bench $(RING_RECORDS) $(RING_ROUNDS) $(RING_FLOOR_NS) > $(BENCH_DIR)/ring.md
	cat $(BENCH_DIR)/ring.md
	erl -noshell -pa $(BENCH_DIR) -eval '{ok, T} = file:read_file("$(BENCH_DIR)/ring.md"), overhead_bench:write_section("bench/RESULTS.md", "Ring per scheduler", binary_to_list(T)), halt().'

$(BENCH_DIR)/ring_bench: bench/ring_bench.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS) -lpthread

# The same tier aggregation in the sink vs in an Erlang process tracer (bench/aggregator_bench.erl).
AGG_CLIENTS  ?= 4
AGG_REQUESTS ?= 2000
bench-aggregator: $(SINK) erl $(BENCH_DIR)/overhead_bench.beam $(BENCH_DIR)/aggregator_bench.beam
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'aggregator_bench:main(["$(AGG_CLIENTS)", "$(AGG_REQUESTS)", "bench/RESULTS.md"])'

$(BENCH_DIR)/aggregator_bench.beam: bench/aggregator_bench.erl | $(BENCH_DIR)
	erlc -o $(BENCH_DIR) $<

# What a flame graph costs (bench/flame_bench.erl), in one run:
# - a capture of 1 M and of 10 M events side by side: traced time, sink peak RSS, time to
#   write the files, alerts; through the tracer of the application env (the ring by
#   default). FLAME_PAUSE: iterations between the loop's 1 ms waits, `auto' = none
#   through the ring, 64 through the port (which queues in the VM otherwise);
# - end to end, call to folded file: fib(FLAME_FIB) and a FLAME_WIDE-iteration
#   lists/maps/ets loop (bench/flame_work.erl) through kprof with the ring, kprof with the
#   port tracer, and an in-VM baseline of eflame's design (bench/flame_baseline.erl),
#   FLAME_ROUNDS interleaved rounds after a warm-up.
FLAME_SMALL  ?= 1000000
FLAME_BIG    ?= 10000000
FLAME_PAUSE  ?= auto
FLAME_ROUNDS ?= 5
FLAME_FIB    ?= 25
FLAME_WIDE   ?= 20000
FLAME_BEAMS  := $(BENCH_DIR)/flame_bench.beam $(BENCH_DIR)/flame_work.beam \
                $(BENCH_DIR)/flame_baseline.beam $(BENCH_DIR)/overhead_bench.beam
bench-flame: $(SINK) $(NIF) erl $(FLAME_BEAMS)
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_bench:main(["$(FLAME_SMALL)", "$(FLAME_BIG)", "$(FLAME_PAUSE)", "$(FLAME_ROUNDS)", "$(FLAME_FIB)", "$(FLAME_WIDE)", "bench/RESULTS.md"])'

$(BENCH_DIR)/flame_bench.beam: bench/flame_bench.erl $(ERL_BEAM) | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(BENCH_DIR) $<

$(BENCH_DIR)/flame_work.beam $(BENCH_DIR)/flame_baseline.beam: $(BENCH_DIR)/%.beam: bench/%.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<

# Issue 22, flame on real code (bench/flame_real.erl's workloads). Separate targets, in
# `make bench' through bench-flame-real; each rewrites its section of bench/RESULTS.md:
#   make bench-flame-e2e     call to files, traced time, files latency, sink CPU and memory,
#                            self-time sums (corrected and not) beside eprof and untraced,
#                            top 15 of kprof and eprof (FLAME_E2E_RUNS rounds)
#   make bench-flame-vm      what the tracing costs the traced process beside the null NIF
#                            tracer's floor, pattern true and {caller} (bench/flame_vm_bench.erl)
#   make bench-stacks        flame stacks without {caller} against the BEAM's own, on
#                            recorded traces of the workloads (bench/stack_quality.c)
#   make bench-flame-sink    the sink's flame path on compile:file's events (bench/flame_sink.c)
#   make bench-flame-perf    kprof's top table, corrected and not, and eprof's against perf's
#                            samples of the untraced workloads (FLAME_PERF; by hand: needs perf)
# The recorded traces (dbg file port, about 1.5 GB in all) stay in $(BENCH_DIR)/traces.
FLAME_REAL      ?= compile xmerl digraph
FLAME_PERF      ?= compile digraph xmerl
FLAME_VM_ROUNDS ?= 5
FLAME_E2E_RUNS  ?= 3
FLAME_TRACES    := $(BENCH_DIR)/traces
FLAME_REAL_BEAMS := $(BENCH_DIR)/flame_real.beam $(BENCH_DIR)/flame_vm_bench.beam \
                    $(BENCH_DIR)/overhead_bench.beam
.PHONY: bench-flame-real bench-flame-e2e bench-flame-vm bench-stacks bench-flame-sink bench-flame-perf
bench-flame-real: bench-flame-e2e bench-flame-vm bench-stacks bench-flame-sink

bench-flame-e2e: $(SINK) $(NIF) erl $(FLAME_REAL_BEAMS)
	erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_real:run_bench(["e2e", "bench/RESULTS.md", "$(FLAME_E2E_RUNS)" | string:lexemes("$(FLAME_REAL)", " ")]), halt()'

bench-stacks: erl $(FLAME_REAL_BEAMS) $(BENCH_DIR)/stack_quality
	mkdir -p $(FLAME_TRACES)
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_real:run_bench(["stacks", "$(BENCH_DIR)/stack_quality", "$(FLAME_TRACES)", "bench/RESULTS.md" | string:lexemes("$(FLAME_REAL) server", " ")]), halt()'

# perf record of the untraced workloads (needs perf, and kernel.perf_event_paranoid <= 2
# for one's own processes): not in bench-flame-real, run by hand.
bench-flame-perf: $(SINK) $(NIF) erl $(FLAME_REAL_BEAMS)
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_real:run_bench(["perf", "bench/RESULTS.md", "$(abspath $(BENCH_DIR))" | string:lexemes("$(FLAME_PERF)", " ")]), halt()'

bench-flame-sink: erl $(FLAME_REAL_BEAMS) $(BENCH_DIR)/flame_sink
	mkdir -p $(FLAME_TRACES)
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_real:run_bench(["sink", "$(BENCH_DIR)/flame_sink", "$(FLAME_TRACES)", "bench/RESULTS.md"]), halt()'

$(BENCH_DIR)/stack_quality $(BENCH_DIR)/flame_sink: $(BENCH_DIR)/%: bench/%.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)

bench-flame-vm: $(SINK) $(NIF) erl $(FLAME_REAL_BEAMS) $(BENCH_DIR)/null_tracer.beam \
                $(BENCH_DIR)/null_tracer.so
	erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'flame_vm_bench:main(["$(FLAME_VM_ROUNDS)", "bench/RESULTS.md" | string:lexemes("$(FLAME_REAL)", " ")])'

$(BENCH_DIR)/flame_real.beam $(BENCH_DIR)/flame_vm_bench.beam: $(BENCH_DIR)/%.beam: bench/%.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<

# Issue 25, record and replay (bench/record_bench.erl), the "Record and replay" section:
# compile:file (flame_real's `compile') captured live, captured with `record', the file
# replayed by `kprof_sink --replay' to folded + callgrind, RECORD_RUNS rounds; beside
# Looking Glass's file tracer (the first RECORD_LG_RUNS rounds) and lg_callgrind (the
# first RECORD_LG_CG_RUNS: minutes each) when built outside the repository in
# $(KPROF_PEERS) by bench/lg_build.sh (else SKIPPED, and said so).
RECORD_RUNS       ?= 5
RECORD_LG_RUNS    ?= 3
RECORD_LG_CG_RUNS ?= 1
.PHONY: bench-record
bench-record: $(SINK) $(NIF) erl $(FLAME_REAL_BEAMS) $(BENCH_DIR)/record_bench.beam
	erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'record_bench:main(["$(RECORD_RUNS)", "$(RECORD_LG_RUNS)", "$(RECORD_LG_CG_RUNS)", "$(KPROF_PEERS)", "$(abspath $(SINK))", "bench/RESULTS.md"])'

$(BENCH_DIR)/record_bench.beam: bench/record_bench.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<
