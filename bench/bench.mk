# Sink throughput benchmark (included by the top-level Makefile).
#   make bench                    replays a recorded stream of >= 5 M real trace messages
#                                 into a framing-only reader and into kprof_sink, 5 runs each
#   make bench BENCH_RUNS=9       more runs
#   make bench-stream             only (re)generate the stream if it is missing
# The stream is recorded once from a real traced workload by bench/gen_stream.erl into
# $(B)/bench/stream.bin (+ stream.count) and reused; delete it to record a new one.
# Results go to stdout and to the "Sink throughput" section of bench/RESULTS.md.
BENCH_DIR    := $(B)/bench
BENCH_MSGS   ?= 5000000
BENCH_RUNS   ?= 5
BENCH_BINS   := $(BENCH_DIR)/replay $(BENCH_DIR)/frame_only

.PHONY: bench bench-stream
bench: $(SINK) $(BENCH_BINS)
	CC=$(CC) CFLAGS="$(CFLAGS)" B=$(B) SINK=$(SINK) BENCH_MSGS=$(BENCH_MSGS) BENCH_RUNS=$(BENCH_RUNS) bench/run.sh

bench-stream:
	B=$(B) BENCH_MSGS=$(BENCH_MSGS) bench/run.sh --stream-only

$(BENCH_DIR):
	mkdir -p $@

$(BENCH_DIR)/replay: bench/replay.c $(wildcard include/*.h) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)

$(BENCH_DIR)/frame_only: bench/frame_only.c $(wildcard include/*.h) $(B)/libkprof_sink.a | $(BENCH_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a
