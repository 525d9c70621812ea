# Tier profiler benchmark (included by the top-level Makefile).
#   make bench-tiers                          5000 req/s offered, 3 s per mode, 3 rounds
#   make bench-tiers TIERS_RATE=8000 TIERS_SECONDS=5 TIERS_ROUNDS=3
# A three-tier gen_server chain driven open loop, untraced vs tiers vs tiers sampled 0.1,
# side by side in one VM (bench/tiers_bench.erl). Prints a table and rewrites the
# "Tiers" section of bench/RESULTS.md. Schedulers do not busy-wait (+sbwt none), so the
# VM's CPU time is work, not spinning.
#   make bench-tiers-parts                    the same service with tiers on and each of
#                                             their parts off in turn (bench/tiers_parts.erl):
#                                             "Tiers: where the time goes" of bench/RESULTS.md
#   make bench-tiers-event                    one tier call's cost in the traced process, by the
#                                             parts of the tier match spec, null NIF and ring
#                                             (bench/tiers_event.erl): "Tiers: one event, by the
#                                             parts of its match spec"
#   make bench-tiers-shop                     examples/shop untraced and with tiers, per route
#                                             and rate (SHOP_CASES, Path@Rate,...), interleaved
#                                             (bench/tiers_shop_bench.erl): "Tiers on the shop"
#   make bench-tiers-perf                     perf record of the VM (+JPperf true) and the sink,
#                                             untraced then tiers: CPU per request by symbol
#                                             (bench/tiers_perf.erl; needs perf): "Tiers: perf
#                                             of the node and the sink"
#   make soak-tiers                           the shop at the highest rate it sustains
#                                             untraced (SOAK_RATE=auto, or a number),
#                                             SOAK_SECONDS untraced then with tiers, windows of
#                                             SOAK_WINDOW s (bench/tiers_soak.erl): 20 minutes;
#                                             "Tiers: a soak at rate"
TIERS_BENCH_DIR := $(B)/bench/tiers
TIERS_RATE      ?= 5000
TIERS_SECONDS   ?= 3
TIERS_ROUNDS    ?= 3
PARTS_ROUNDS    ?= 5
SHOP_CASES      ?= /users/:id@200,/users/:id@1000,/catalog@60
SHOP_SECONDS    ?= 3
SHOP_ROUNDS     ?= 5
SOAK_RATE       ?= auto
SOAK_SECONDS    ?= 600
SOAK_WINDOW     ?= 30

.PHONY: bench-tiers
bench-tiers: $(SINK) erl $(TIERS_BENCH_DIR)/tiers_bench.beam $(BENCH_DIR)/overhead_bench.beam
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(TIERS_BENCH_DIR) \
	  -pa $(BENCH_DIR) \
	  -eval 'tiers_bench:main(["$(TIERS_RATE)", "$(TIERS_SECONDS)", "$(TIERS_ROUNDS)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_bench.beam: bench/tiers_bench.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

.PHONY: bench-tiers-parts
bench-tiers-parts: $(SINK) $(NIF) erl $(TIERS_BENCH_DIR)/tiers_bench.beam \
                   $(TIERS_BENCH_DIR)/tiers_parts.beam $(BENCH_DIR)/overhead_bench.beam \
                   $(BENCH_DIR)/null_tracer.beam $(BENCH_DIR)/null_tracer.so
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(TIERS_BENCH_DIR) \
	  -pa $(BENCH_DIR) \
	  -eval 'tiers_parts:main(["$(TIERS_RATE)", "$(TIERS_SECONDS)", "$(PARTS_ROUNDS)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_parts.beam: bench/tiers_parts.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

EVENT_CALLS  ?= 20000
EVENT_ROUNDS ?= 31
.PHONY: bench-tiers-event
bench-tiers-event: $(SINK) $(NIF) erl $(TIERS_BENCH_DIR)/tiers_event.beam \
                   $(BENCH_DIR)/overhead_bench.beam $(BENCH_DIR)/null_tracer.beam \
                   $(BENCH_DIR)/null_tracer.so
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(TIERS_BENCH_DIR) \
	  -pa $(BENCH_DIR) \
	  -eval 'tiers_event:main(["$(EVENT_CALLS)", "$(EVENT_ROUNDS)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_event.beam: bench/tiers_event.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

$(TIERS_BENCH_DIR):
	mkdir -p $@

.PHONY: bench-tiers-shop
bench-tiers-shop: $(SINK) $(NIF) erl shop $(TIERS_BENCH_DIR)/tiers_bench.beam \
                  $(TIERS_BENCH_DIR)/tiers_shop_bench.beam $(BENCH_DIR)/overhead_bench.beam
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(B)/shop/ebin \
	  -pa $(TIERS_BENCH_DIR) -pa $(BENCH_DIR) \
	  -eval 'tiers_shop_bench:main(["$(SHOP_CASES)", "$(SHOP_SECONDS)", "$(SHOP_ROUNDS)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_shop_bench.beam: bench/tiers_shop_bench.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

.PHONY: soak-tiers
soak-tiers: $(SINK) $(NIF) erl shop $(TIERS_BENCH_DIR)/tiers_bench.beam \
            $(TIERS_BENCH_DIR)/tiers_soak.beam $(BENCH_DIR)/overhead_bench.beam
	erl -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin -pa $(B)/shop/ebin \
	  -pa $(TIERS_BENCH_DIR) -pa $(BENCH_DIR) \
	  -eval 'tiers_soak:main(["$(SOAK_RATE)", "$(SOAK_SECONDS)", "$(SOAK_WINDOW)", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_soak.beam: bench/tiers_soak.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<

.PHONY: bench-tiers-perf
bench-tiers-perf: $(SINK) $(NIF) erl $(TIERS_BENCH_DIR)/tiers_bench.beam \
                  $(TIERS_BENCH_DIR)/tiers_perf.beam $(BENCH_DIR)/overhead_bench.beam
	erl +JPperf true -noshell +sbwt none +sbwtdcpu none +sbwtdio none -pa erlang/ebin \
	  -pa $(TIERS_BENCH_DIR) -pa $(BENCH_DIR) \
	  -eval 'tiers_perf:main(["$(TIERS_RATE)", "10", "$(abspath $(TIERS_BENCH_DIR))/perf", "bench/RESULTS.md"])'

$(TIERS_BENCH_DIR)/tiers_perf.beam: bench/tiers_perf.erl $(ERL_BEAM) | $(TIERS_BENCH_DIR)
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(TIERS_BENCH_DIR) $<
