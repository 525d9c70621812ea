# Check unit tests of the sink (included by the top-level Makefile).
#   make check-c      the suites, optimised build
#   make check-asan   the same suites built with ASan + UBSan
#   make check-mem    the suites under valgrind (memcheck, leak check; fair
#                     scheduling of threads, for the ring's writers on threads)
# The suite of port/main.c runs the sink program itself: KPROF_SINK names it.
CHECK_SRC  := $(wildcard test/c/*.c)
CHECK_BIN  := $(B)/test/check_kprof
ASAN_BIN   := $(B)/asan/check_kprof
SAN_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TEST_DATA  := test/data

$(CHECK_BIN): $(CHECK_SRC) $(wildcard test/c/*.h) $(B)/libkprof_sink.a | $(B)/test
	$(CC) $(ALL_CFLAGS) -Itest/c -o $@ $(CHECK_SRC) $(B)/libkprof_sink.a $(EI_LIBS) $(CHECK_LIBS)

$(ASAN_BIN): $(CHECK_SRC) $(wildcard test/c/*.h) $(CORE_SRC) $(KS_HDRS) | $(B)/asan
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(SAN_CFLAGS) $(KS_INC) -Itest/c $(EI_CFLAGS) -o $@ \
	  $(CHECK_SRC) $(CORE_SRC) $(EI_LIBS) $(CHECK_LIBS)

check-c: $(CHECK_BIN) $(SINK)
	KPROF_SINK=$(SINK) KPROF_TEST_DATA=$(TEST_DATA) $(CHECK_BIN)

check-asan: $(ASAN_BIN) $(SINK)
	CK_FORK=no ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  KPROF_SINK=$(SINK) KPROF_TEST_DATA=$(TEST_DATA) $(ASAN_BIN)

check-mem: $(CHECK_BIN) $(SINK)
	CK_FORK=no KPROF_SINK=$(SINK) KPROF_TEST_DATA=$(TEST_DATA) valgrind -q --error-exitcode=3 --fair-sched=yes \
	  --leak-check=full --errors-for-leak-kinds=definite,indirect $(CHECK_BIN)
