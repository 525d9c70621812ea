# Line coverage of the sink's C (included by the top-level Makefile; part of `make test`).
#   make coverage               Check and the fuzzers' corpora, per file of port/; fails when
#                               a file is under COV_MIN % (default 70)
# A build of its own with clang's source-based coverage (-fprofile-instr-generate
# -fcoverage-mapping, -O0): the Check suites ($(COV_DIR)/check_kprof, whose suite of
# port/main.c runs $(COV_DIR)/kprof_sink, built the same way) and each fuzzer's
# coverage build (fuzz/fuzz.mk, FUZZ_COV_BINS) over its corpus in $(FUZZ_DIR) (seeded
# when missing; `make fuzz-run' grows them). The profiles are merged and read by
# llvm-cov for every object at once (scripts/coverage.sh).
COV_DIR   := $(B)/cov
COV_MIN   ?= 70
COV_FLAGS := -std=c11 -D_GNU_SOURCE -g -O0 -fprofile-instr-generate -fcoverage-mapping \
             -DKS_TIERS_INFLIGHT=512 $(KS_INC) $(EI_CFLAGS) $(UV_CFLAGS)

.PHONY: coverage
coverage: $(COV_DIR)/check_kprof $(COV_DIR)/kprof_sink $(FUZZ_COV_BINS)
	COV_DIR=$(COV_DIR) FUZZ_DIR=$(FUZZ_DIR) COV_MIN=$(COV_MIN) scripts/coverage.sh

$(COV_DIR)/check_kprof: $(CHECK_SRC) $(wildcard test/c/*.h) $(CORE_SRC) $(KS_HDRS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(COV_FLAGS) -Itest/c -o $@ $(CHECK_SRC) $(CORE_SRC) $(EI_LIBS) $(CHECK_LIBS)

$(COV_DIR)/kprof_sink: port/main.c $(CORE_SRC) $(KS_HDRS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(COV_FLAGS) -o $@ port/main.c $(CORE_SRC) $(EI_LIBS) $(UV_LIBS)
