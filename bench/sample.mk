# kprof:sample against perf and tracing on the real OTP workloads
# (bench/sample_bench.erl; the workloads: erlang/test/kprof_real_work.erl); part of `make bench`.
#   make bench-sample                          5 rounds, every workload
#   make bench-sample SAMPLE_ROUNDS=9 SAMPLE_WORK=compile
# The bench's node runs with +JPperf map (sampling needs it); perf rows and the rank
# agreement need perf on the PATH (Debian: linux-perf), else they say SKIPPED.
SAMPLE_ROUNDS ?= 5
SAMPLE_WORK   ?= all

.PHONY: bench-sample
bench: bench-sample

bench-sample: $(SINK) $(NIF) erl $(BENCH_DIR)/sample_bench.beam $(BENCH_DIR)/kprof_real_work.beam \
              $(BENCH_DIR)/overhead_bench.beam $(BENCH_DIR)/kprof_sample_tests.beam \
              $(BENCH_DIR)/sample_replay
	erl +JPperf map -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'sample_bench:main(["$(SAMPLE_ROUNDS)", "$(SAMPLE_WORK)", "bench/RESULTS.md", "$(BENCH_DIR)/sample_replay"])'

$(BENCH_DIR)/sample_bench.beam: bench/sample_bench.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<

$(BENCH_DIR)/kprof_sample_tests.beam: erlang/test/kprof_sample_tests.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<

# The sink's work per sample on a recorded session (bench-sample records one).
$(BENCH_DIR)/sample_replay: bench/sample_replay.c $(KS_HDRS) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)
