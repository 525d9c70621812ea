# What a web capture costs the node (included by the top-level Makefile; part of `make bench`).
#   make bench-web                      7 rounds per mode, 250 ms apart
#   make bench-web WEB_ROUNDS=11 WEB_GAP_MS=500
# With ~10,000 and ~100,000 functions loaded (modules made into $(B)/bench/webgen and kept),
# one traced request's start, first call and stop, and the worst stall of another process,
# with the call pattern set and cleared per capture (`toggle') and kept between captures
# (`keep', keep_patterns_ms), side by side; then what the kept pattern costs an untraced
# process. Prints a table and rewrites the "Web capture cost" section of bench/RESULTS.md.
WEB_BENCH_DIR := $(B)/bench/webgen
WEB_ROUNDS    ?= 7
WEB_GAP_MS    ?= 250

.PHONY: bench-web
bench: bench-web
bench-web: $(SINK) $(NIF) erl $(WEB_BENCH_DIR)/web_bench.beam $(BENCH_DIR)/overhead_bench.beam
	erl -noshell -pa erlang/ebin -pa $(WEB_BENCH_DIR) -pa $(BENCH_DIR) \
	  -eval 'web_bench:main(["$(WEB_ROUNDS)", "$(WEB_GAP_MS)", "$(WEB_BENCH_DIR)", "bench/RESULTS.md"])'

$(WEB_BENCH_DIR)/web_bench.beam: bench/web_bench.erl $(ERL_BEAM) | $(WEB_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(WEB_BENCH_DIR) $<

$(WEB_BENCH_DIR):
	mkdir -p $@
