# libFuzzer targets of the sink (included by the top-level Makefile).
#   make fuzz-run                 every target, FUZZ_SECONDS in all (default 30, split evenly)
#   make fuzz-run FUZZ_SECONDS=120
#   make fuzz-regress             every file of fuzz/regress/ through every target, no fuzzing
#   make fuzz-cov                 line coverage of port/ by the corpora (llvm-cov report)
#   make fuzz-otp-corpus          this OTP's trace messages and ring records into fuzz/otp/N/
#                                 (N: its release), seeds of the corpora and inputs of
#                                 fuzz-regress; on another OTP: make otp-make OTP=27
#                                 TARGET=fuzz-otp-corpus OTP_BRING=fuzz/otp/27
# Built with clang (libFuzzer + ASan + UBSan) from the library sources, not from
# $(B)/libkprof_sink.a: every object needs the fuzzer's coverage instrumentation.
# Seed corpora are made at run time into $(B)/fuzz/corpus-{sink,decode,ring,writers,record,sample}/ from
# the VM's recorded streams (test/data/*.bin and a small bench/gen_stream.erl recording),
# command frames (fuzz/mkcorpus.escript), ring records (fuzz/mkring.escript) and capture
# scripts with hostile names (fuzz/mkwriters.escript), recorded captures (fuzz/regress/record-*),
# recorded sampling sessions (test/data/sample_*.ksr, fuzz/mksample.escript); the corpora grow across runs. Crash inputs
# are written to $(B)/fuzz/. KPROF_FUZZ_LAX_ECHO=1: see fuzz/fuzz_sink.c.
FUZZ_DIR     := $(B)/fuzz
FUZZ_CC      ?= $(firstword $(shell command -v clang-14 clang 2>/dev/null) clang)
FUZZ_SECONDS ?= 30
# KS_TIERS_INFLIGHT: 512 request slots by default instead of 20000: every input that
# starts the tiers would allocate, clear and free 20000 (fuzz_sink: 128 -> 736 exec/s).
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE $(WARN) -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -DKS_TIERS_INFLIGHT=512 $(KS_INC) $(EI_CFLAGS)
FUZZ_BINS    := $(FUZZ_DIR)/fuzz_sink $(FUZZ_DIR)/fuzz_decode $(FUZZ_DIR)/fuzz_ring $(FUZZ_DIR)/fuzz_writers \
                $(FUZZ_DIR)/fuzz_record $(FUZZ_DIR)/fuzz_sample

FUZZ_COV_FLAGS := -std=c11 -D_GNU_SOURCE -g -O0 -fsanitize=fuzzer -DKS_TIERS_INFLIGHT=512 \
                  -fprofile-instr-generate -fcoverage-mapping $(KS_INC) $(EI_CFLAGS)
FUZZ_COV_BINS  := $(FUZZ_DIR)/cov/fuzz_sink $(FUZZ_DIR)/cov/fuzz_decode $(FUZZ_DIR)/cov/fuzz_ring \
                  $(FUZZ_DIR)/cov/fuzz_writers $(FUZZ_DIR)/cov/fuzz_record $(FUZZ_DIR)/cov/fuzz_sample

.PHONY: fuzz-build fuzz-run fuzz-regress fuzz-cov
fuzz-build: $(FUZZ_BINS)

$(FUZZ_DIR):
	mkdir -p $@

$(FUZZ_BINS): $(FUZZ_DIR)/%: fuzz/%.c $(CORE_SRC) $(KS_HDRS) | $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(CORE_SRC) $(EI_LIBS)

fuzz-run: $(FUZZ_BINS)
	FUZZ_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh run

fuzz-regress: $(FUZZ_BINS)
	FUZZ_DIR=$(FUZZ_DIR) fuzz/run.sh regress

$(FUZZ_COV_BINS): $(FUZZ_DIR)/cov/%: fuzz/%.c $(CORE_SRC) $(KS_HDRS)
	mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_COV_FLAGS) -o $@ $< $(CORE_SRC) $(EI_LIBS)

fuzz-cov: $(FUZZ_COV_BINS)
	FUZZ_DIR=$(FUZZ_DIR) fuzz/run.sh cov

# Each OTP's own trace messages (test/record's scenarios, written by this VM's
# erl_tracer) and ring records (written by the kprof_tracer NIF as built for
# this VM: fuzz/ring_record.c, fuzz/otp_ring.escript), committed in fuzz/otp/N/.
.PHONY: fuzz-otp-corpus
fuzz-otp-corpus: $(FUZZ_DIR)/ring_record $(REC_BEAM) $(NIF) erl
	@rel=$$(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().'); \
	  rm -rf fuzz/otp/$$rel $(FUZZ_DIR)/otp-rec && mkdir -p fuzz/otp/$$rel $(FUZZ_DIR)/otp-rec && \
	  erl -noshell -pa $(B)/record -s kprof_trace_recorder main $(FUZZ_DIR)/otp-rec && \
	  for f in $(FUZZ_DIR)/otp-rec/*.bin; do cp $$f fuzz/otp/$$rel/trace-$$(basename $$f); done && \
	  escript fuzz/otp_ring.escript $(FUZZ_DIR)/ring_record fuzz/otp/$$rel/ring-work

$(FUZZ_DIR)/ring_record: fuzz/ring_record.c $(KS_HDRS) $(B)/libkprof_sink.a | $(FUZZ_DIR)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libkprof_sink.a $(EI_LIBS)
