# Tier profiler benchmark (included by the top-level Makefile).
#   make bench-tiers                          5000 req/s offered, 3 s per mode, 3 rounds
#   make bench-tiers TIERS_RATE=8000 TIERS_SECONDS=5 TIERS_ROUNDS=3
# A three-tier gen_server chain driven open loop, untraced vs tiers vs tiers sampled 0.1,
# side by side in one VM (bench/tiers_bench.erl). Prints a table and rewrites the
# "Tiers" section of bench/RESULTS.md. Schedulers do not busy-wait (+sbwt none), so the
# VM's CPU time is work, not spinning.
TIERS_BENCH_DIR := $(B)/bench/tiers
TIERS_RATE      ?= 5000
TIERS_SECONDS   ?= 3
TIERS_ROUNDS    ?= 3

.PHONY: bench-tiers
bench-tiers: $(SINK) erl $(TIERS_BENCH_DIR)/tiers_bench.beam $(BENCH_DIR)/overhead_bench.beam
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(TIERS_BENCH_DIR) \
	  -pa $(BENCH_DIR) \
	  -eval 'tiers_bench:main(["$(TIERS_RATE)", "$(TIERS_SECONDS)", "$(TIERS_ROUNDS)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_bench.beam: bench/tiers_bench.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

$(TIERS_BENCH_DIR):
	mkdir -p $@
