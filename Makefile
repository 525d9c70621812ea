# kprof top-level build. `make demo` and `make test` are the two commands a user types.
# Everything built goes to _build/ or erlang/{ebin,priv}; nothing built is committed.

CC        ?= gcc
ERL_ROOT  := $(shell erl -noshell -eval 'io:format("~s",[code:root_dir()]),halt().' 2>/dev/null)
EI_DIR    := $(wildcard $(ERL_ROOT)/lib/erl_interface-*)
EI_CFLAGS := -I$(EI_DIR)/include
EI_LIBS   := -L$(EI_DIR)/lib -lei
UV_CFLAGS := $(shell pkg-config --cflags libuv 2>/dev/null)
UV_LIBS   := $(shell pkg-config --libs libuv 2>/dev/null)
CHECK_LIBS:= $(shell pkg-config --libs check 2>/dev/null)

WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS    ?= -O2 -g -flto=auto
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -Iinclude $(EI_CFLAGS) $(UV_CFLAGS)

B         := _build
# The sink's library part: everything but main.c, so tests, fuzzers and benches link it.
CORE_SRC  := $(wildcard port/*/*.c)
# One object directory per folder (core, proto, guard, ring, tiers, flame): no two names collide.
CORE_OBJ  := $(CORE_SRC:port/%.c=$(B)/obj/%.o)
SINK      := erlang/priv/kprof_sink
# The tracer NIF the tiers trace with (nif/, erlang/src/kprof_tracer.erl).
NIF       := erlang/priv/kprof_tracer.so
NIF_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC -shared -Iinclude -I$(ERL_ROOT)/usr/include

.PHONY: all sink nif erl deps demo test check-c check-asan check-mem eunit fuzz-run bench recordings clean
all: sink nif erl shop examples

deps:
	@scripts/deps.sh

sink: $(SINK)

nif: $(NIF)

$(NIF): nif/kprof_tracer_nif.c include/ks_ring.h include/ks_budget.h | erlang/priv
	$(CC) $(NIF_CFLAGS) -o $@ $< -lpthread

$(B)/obj/%.o: port/%.c $(wildcard include/*.h) | $(B)/obj
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/obj $(B)/asan $(B)/test $(B)/test/ebin erlang/ebin erlang/priv:
	mkdir -p $@

$(B)/libkprof_sink.a: $(CORE_OBJ)
	$(AR) rcs $@ $^

$(SINK): port/main.c $(B)/libkprof_sink.a | erlang/priv
	$(CC) $(ALL_CFLAGS) -o $@ port/main.c $(B)/libkprof_sink.a $(EI_LIBS) $(UV_LIBS)

# The fault-injection build: the same sources with KS_FAULT_INJECTION, whose
# {test_delay_us, Us} command makes the sink slow on purpose (the guard's
# tests start it through kprof's sink_path). Never in erlang/priv: the
# product sink has no such command and no such branch per event.
FAULT_SINK := $(B)/fault/kprof_sink
FAULT_OBJ  := $(CORE_SRC:port/%.c=$(B)/fault/obj/%.o)

$(B)/fault/obj/%.o: port/%.c $(wildcard include/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DKS_FAULT_INJECTION -c -o $@ $<

$(FAULT_SINK): port/main.c $(FAULT_OBJ)
	$(CC) $(ALL_CFLAGS) -DKS_FAULT_INJECTION -o $@ port/main.c $(FAULT_OBJ) $(EI_LIBS) $(UV_LIBS)

# Link-time optimisation inlines across port/*/*.c (about 10 % fewer instructions
# per message); the archive needs the plugin-aware ar.
AR := gcc-ar

include test/c/check.mk
include erlang/erlang.mk
# Each part's own rules (fuzz/fuzz.mk, bench/bench.mk, bench/tiers.mk,
# examples/shop/shop.mk, ...).
-include $(sort $(wildcard fuzz/*.mk bench/*.mk test/*.mk examples/*.mk examples/*/*.mk))

# deps first, then a fresh make: the variables above need erl and pkg-config installed.
demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

test: deps
	@$(MAKE) --no-print-directory all
	@scripts/test.sh

clean:
	rm -rf $(B) erlang/ebin erlang/doc $(SINK) $(NIF)
