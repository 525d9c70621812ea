# Module and function sizes (included by the top-level Makefile).
#   make sizecheck                         the tables: Erlang modules by code lines, the longest
#                                          Erlang and C functions, what is over its bound marked
#   make sizecheck SIZECHECK=--check       the same, failing when anything is over
#   make sizecheck SIZECHECK="--check --only erlang/src/kprof_tiers.erl"
#                                          failing only for the files named
# Bounds (issue 24): a module of erlang/src at most 600 code lines, an Erlang function at
# most 60, a C function at most 100 (scripts/sizecheck.escript says what a line is).
SIZECHECK ?=
.PHONY: sizecheck
sizecheck:
	scripts/sizecheck.escript $(SIZECHECK)
