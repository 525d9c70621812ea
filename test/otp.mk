# kprof on other OTPs (included by the top-level Makefile), each in a Debian
# root that has it, built and cached by scripts/otp_root.sh (needs root and the
# Debian archive; SKIPPED, with why, otherwise):
#   make test-otp OTP=27        a copy of the tree built and tested inside the
#                               root (scripts/otp_test.sh): the build with no
#                               warning, Check, EUnit, the docs check, mix with
#                               the root's Elixir, rebar3 with its rebar3;
#                               OTP=25 (bookworm), 27 (trixie) or 29 (sid);
#                               OTP_SUITES="check-c eunit" runs some only
#   make test-otps              OTP 27 then 29, a line each (make test runs them side by side)
#   make bench-otp OTP=27 BENCH=bench-overhead [BENCH_VARS="REAL_RUNS=1"]
#                               a bench target of the tree's, run in the root
#                               (scripts/otp_make.sh); the OTPs' rows side by
#                               side in bench/RESULTS.md ("Other OTPs side by
#                               side", scripts/otp_bench_table.escript)
#   make bench-otps BENCH=bench-real
#                               the same on 25, 27 and 29 one after the other
#   make otp-make OTP=29 TARGET=fuzz-otp-corpus OTP_BRING=fuzz/otp/29
#                               any target in the root; OTP_BRING: what it
#                               wrote, copied back into this tree
OTP        ?= 27
OTP_SUITES ?=
BENCH      ?= bench-overhead
BENCH_VARS ?=
TARGET     ?=
OTP_BRING  ?=

.PHONY: test-otp test-otps bench-otp bench-otps otp-make
test-otp:
	@scripts/otp_test.sh $(OTP) $(OTP_SUITES)

test-otps:
	@rc=0; for v in 27 29; do scripts/otp_test.sh $$v $(OTP_SUITES) || rc=1; done; \
	for v in 27 29; do cat _build/otp/$$v/summary 2>/dev/null; done; exit $$rc

bench-otp:
	@scripts/otp_make.sh $(OTP) $(BENCH) $(BENCH_VARS)

bench-otps:
	@rc=0; for v in 25 27 29; do scripts/otp_make.sh $$v $(BENCH) $(BENCH_VARS) || rc=1; done; exit $$rc

otp-make:
	@scripts/otp_make.sh $(OTP) $(TARGET) $(foreach p,$(OTP_BRING),--bring $(p)) $(BENCH_VARS)
