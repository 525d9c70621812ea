# kprof against eprof, fprof, eflame and eflambe on real OTP workloads
# (bench/real_bench.erl; the workloads: erlang/test/kprof_real_work.erl, which the
# EUnit suite kprof_real_tests runs too); part of `make bench`.
#   make bench-real                          3 rounds, every workload
#   make bench-real REAL_RUNS=5 REAL_WORK=compile,xmerl
#   KPROF_PEERS=/path make bench-real        eflame and eflambe built there:
#                                            /path/eflame/ebin, /path/eflambe/ebin
#                                            (meck: /path/meck/ebin or Debian's erlang-meck)
# Each run is a VM of its own, killed past REAL_TIMEOUT seconds or REAL_MAX_MB
# of resident memory (and said so in the table). Peers are never built here
# nor committed: a peer that is not there is reported SKIPPED.
KPROF_PEERS  ?= $(HOME)/kprof-peers
REAL_RUNS    ?= 3
REAL_TIMEOUT ?= 150
REAL_MAX_MB  ?= 4096
REAL_WORK    ?= all

.PHONY: bench-real
bench: bench-real

bench-real: $(SINK) $(NIF) erl $(BENCH_DIR)/real_bench.beam $(BENCH_DIR)/kprof_real_work.beam \
            $(BENCH_DIR)/overhead_bench.beam
	erl -noshell -pa erlang/ebin -pa $(BENCH_DIR) \
	  -eval 'real_bench:main(["$(REAL_RUNS)", "$(REAL_TIMEOUT)", "$(REAL_MAX_MB)", "$(KPROF_PEERS)", "$(REAL_WORK)", "bench/RESULTS.md"])'

$(BENCH_DIR)/real_bench.beam: bench/real_bench.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<

$(BENCH_DIR)/kprof_real_work.beam: erlang/test/kprof_real_work.erl | $(BENCH_DIR)
	erlc $(ERLC_FLAGS) -o $(BENCH_DIR) $<
