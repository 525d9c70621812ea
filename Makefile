# kprof top-level build. `make demo` and `make test` are the two commands a user types.
# Everything built goes to _build/ or erlang/{ebin,priv}; nothing built is committed.

CC        ?= gcc
# The OTP root and erl_interface's directory, as the running erl names them
# (code:lib_dir/1: the one of this OTP, however many versions are installed).
ERL_DIRS  := $(shell erl -noshell -eval 'io:format("~s ~s", [code:root_dir(), case code:lib_dir(erl_interface) of {error, _} -> ""; D -> D end]), halt().' 2>/dev/null)
ERL_ROOT  := $(word 1,$(ERL_DIRS))
EI_DIR    := $(word 2,$(ERL_DIRS))
EI_CFLAGS := -I$(EI_DIR)/include
EI_LIBS   := -L$(EI_DIR)/lib -lei
# libuv, linked statically where a static libuv is installed (Debian's
# libuv1-dev: libuv_a.a and libuv-static.pc; elsewhere libuv.a beside the
# shared one), so that a release runs where no libuv is installed;
# `make UV_LINK=shared` links the shared library.
UV_LINK   ?= static
UV_CFLAGS := $(shell pkg-config --cflags libuv 2>/dev/null)
ifeq ($(UV_LINK),static)
UV_A      := $(wildcard $(shell pkg-config --variable=libdir libuv 2>/dev/null)/libuv.a)
UV_STATIC := $(if $(shell pkg-config --exists libuv-static 2>/dev/null && echo y),\
               $(shell pkg-config --libs libuv-static 2>/dev/null),\
               $(if $(UV_A),$(patsubst -luv,$(UV_A),$(shell pkg-config --libs --static libuv 2>/dev/null))))
endif
UV_LIBS   := $(strip $(or $(UV_STATIC),$(shell pkg-config --libs libuv 2>/dev/null),-luv))
CHECK_LIBS:= $(shell pkg-config --libs check 2>/dev/null)
# libzstd (Debian's libzstd-dev; libzstd1 is in every Debian system): the
# recordings' compression (port/record/record_*.c), linked shared. Every link of
# the sink's library part (the sink, tests, fuzzers, benches) takes EI_LIBS, so
# it goes there.
ZSTD_LIBS := $(or $(shell pkg-config --libs libzstd 2>/dev/null),-lzstd)
EI_LIBS   += $(ZSTD_LIBS)

WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
# Link-time optimisation inlines across port/*/*.c (about 10 % fewer instructions
# per message); the archive then needs the compiler's plugin-aware ar (gcc-ar,
# llvm-ar). Without it, or with another compiler, the build has no LTO.
CC_FAMILY := $(shell $(CC) -dM -E - </dev/null 2>/dev/null | grep -q __clang__ && echo clang || \
               { $(CC) -dM -E - </dev/null 2>/dev/null | grep -q __GNUC__ && echo gcc; })
ifeq ($(CC_FAMILY)$(shell command -v gcc-ar 2>/dev/null | grep -c .),gcc1)
LTO       := -flto=auto
AR        := gcc-ar
else ifeq ($(CC_FAMILY)$(shell command -v llvm-ar 2>/dev/null | grep -c .),clang1)
LTO       := -flto=thin
AR        := llvm-ar
endif
CFLAGS    ?= -O2 -g $(LTO)
# include/ holds only the contracts shared between binaries (the ring, the event
# kinds, the memory budget, the options table); every other header is beside its
# folder's sources (port/core/ks_intern.h), named "core/ks_intern.h" from another folder.
KS_INC    := -Iinclude -Iport
KS_HDRS   := $(wildcard include/*.h port/*/*.h nif/*.h)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(KS_INC) $(EI_CFLAGS) $(UV_CFLAGS)

B         := _build
# The sink's library part: everything but main.c, so tests, fuzzers and benches link it.
CORE_SRC  := $(wildcard port/*/*.c)
# One object directory per folder (core, proto, guard, ring, tiers, flame): no two names collide.
CORE_OBJ  := $(CORE_SRC:port/%.c=$(B)/obj/%.o)
SINK      := erlang/priv/kprof_sink
# The tracer NIF the tiers trace with (nif/, erlang/src/kprof_tracer.erl).
NIF       := erlang/priv/kprof_tracer.so
# A NIF is a shared object the VM loads (macOS: a bundle whose erl_nif calls
# the VM resolves at load).
NIF_LDFLAGS := $(if $(filter Darwin,$(shell uname -s)),-bundle -undefined dynamic_lookup,-shared)
NIF_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC $(NIF_LDFLAGS) -Iinclude -I$(ERL_ROOT)/usr/include

.PHONY: all sink nif erl deps preflight demo test check-c check-asan check-mem eunit fuzz-run bench recordings clean
all: sink nif erl shop examples

deps:
	@scripts/deps.sh

# Before anything of the sink or the NIF is compiled: each missing compiler,
# header or library named with its package (scripts/preflight.sh), instead of
# a compiler's or a linker's error.
preflight:
	@CC="$(CC)" MAKE="$(MAKE)" ERL_ROOT="$(ERL_ROOT)" EI_DIR="$(EI_DIR)" UV_CFLAGS="$(UV_CFLAGS)" \
	  UV_LIBS="$(UV_LIBS)" ZSTD_LIBS="$(ZSTD_LIBS)" scripts/preflight.sh

sink: $(SINK)

nif: $(NIF)

$(NIF): nif/kprof_tracer_nif.c nif/ks_nif_etf.h nif/ks_vm_clock.h include/ks_ring.h include/ks_budget.h | erlang/priv preflight
	$(CC) $(NIF_CFLAGS) -o $@ $< -lpthread

$(B)/obj/%.o: port/%.c $(KS_HDRS) | $(B)/obj preflight
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/obj $(B)/asan $(B)/test $(B)/test/ebin erlang/ebin erlang/priv:
	mkdir -p $@

# Made anew each time: `ar r' keeps the members of sources since moved or removed.
$(B)/libkprof_sink.a: $(CORE_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(SINK): port/main.c $(B)/libkprof_sink.a | erlang/priv preflight
	$(CC) $(ALL_CFLAGS) -o $@ port/main.c $(B)/libkprof_sink.a $(EI_LIBS) $(UV_LIBS)

# The fault-injection build: the same sources with KS_FAULT_INJECTION, whose
# {test_delay_us, Us} command makes the sink slow on purpose (the guard's
# tests start it through kprof's sink_path). Never in erlang/priv: the
# product sink has no such command and no such branch per event.
FAULT_SINK := $(B)/fault/kprof_sink
FAULT_OBJ  := $(CORE_SRC:port/%.c=$(B)/fault/obj/%.o)

$(B)/fault/obj/%.o: port/%.c $(KS_HDRS) | preflight
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DKS_FAULT_INJECTION -c -o $@ $<

$(FAULT_SINK): port/main.c $(FAULT_OBJ)
	$(CC) $(ALL_CFLAGS) -DKS_FAULT_INJECTION -o $@ port/main.c $(FAULT_OBJ) $(EI_LIBS) $(UV_LIBS)

include erlang/erlang.mk
# Each part's own rules (test/c/check.mk, fuzz/fuzz.mk, bench/bench.mk,
# examples/shop/shop.mk, ...); a hex package has none of them (the `files' of
# erlang/src/kprof.app.src), and builds the sink, the NIF and erl all the same.
-include $(sort $(wildcard test/c/*.mk fuzz/*.mk bench/*.mk test/*.mk examples/*.mk examples/*/*.mk))

# What rebar3's compile hook (rebar.config) and mix.exs have make build before
# they compile erlang/src themselves: the sink, the NIF and the options header.
# Silent when all is up to date (mix compiles a path dependency at every run).
.PHONY: prebuild
prebuild: sink nif $(ERL_OPTS_HRL) $(ERL_ATOMS_HRL)
	@:

# deps first, then a fresh make: the variables above need erl and pkg-config installed.
demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

test: deps
	@$(MAKE) --no-print-directory all
	@scripts/test.sh

clean:
	rm -rf $(B) erlang/ebin erlang/doc $(SINK) $(NIF)
