# The sink and the NIF built other ways than `make` builds them (included by the
# top-level Makefile).
#   make check-portability   with clang: the sink, the NIF, and the Check suites run;
#                            with KS_PORTABLE (port/core/ks_platform.h: the POSIX
#                            fallbacks of fopencookie, getrandom, F_SETPIPE_SZ):
#                            the sink and the Check suites run; with musl (Debian's
#                            musl-tools): every source of the sink compiled and the
#                            NIF built. Warnings are errors in all three.
# The musl sink is compiled, not linked: Debian has no musl build of libuv or of
# erl_interface's libei to link it with, nor of libzstd: it is compiled with
# KS_NO_RECORD (record answers {error, {record_failed, Path, not_supported}}).
PORT_CFLAGS := -O1 -g -Werror
MUSL_CC     ?= musl-gcc
MUSL_DIR    := $(B)/musl
# uv.h alone, from a directory of its own: -I/usr/include would mix glibc's headers
# into musl's.
MUSL_UV_H   := $(firstword $(wildcard $(patsubst -I%,%/uv.h,$(filter -I%,$(UV_CFLAGS))) /usr/include/uv.h /usr/local/include/uv.h))

.PHONY: check-portability check-clang check-portable check-musl
check-portability: check-clang check-portable check-musl

check-clang:
	$(MAKE) --no-print-directory B=$(B)/clang CC=clang CFLAGS="$(PORT_CFLAGS)" \
	  SINK=$(B)/clang/kprof_sink NIF=$(B)/clang/kprof_tracer.so $(B)/clang/kprof_sink $(B)/clang/kprof_tracer.so check-c

check-portable:
	$(MAKE) --no-print-directory B=$(B)/portable CFLAGS="$(PORT_CFLAGS) -DKS_PORTABLE" \
	  SINK=$(B)/portable/kprof_sink NIF=$(B)/portable/kprof_tracer.so $(B)/portable/kprof_sink check-c

check-musl: | preflight
	@command -v $(MUSL_CC) >/dev/null || { echo "check-musl: no $(MUSL_CC): apt-get install musl-tools"; exit 1; }
	@test -n "$(MUSL_UV_H)" || { echo "check-musl: no uv.h found"; exit 1; }
	rm -rf $(MUSL_DIR) && mkdir -p $(MUSL_DIR)/include $(MUSL_DIR)/obj
	ln -s $(MUSL_UV_H) $(MUSL_DIR)/include/uv.h
	if [ -d $(dir $(MUSL_UV_H))uv ]; then ln -s $(dir $(MUSL_UV_H))uv $(MUSL_DIR)/include/uv; fi
	for f in $(CORE_SRC) port/main.c; do \
	  o=$(MUSL_DIR)/obj/$$(echo $$f | tr / _).o; \
	  $(MUSL_CC) -std=c11 -D_GNU_SOURCE -DKS_NO_RECORD $(WARN) $(PORT_CFLAGS) $(KS_INC) $(EI_CFLAGS) -I$(MUSL_DIR)/include \
	    -c -o $$o $$f || exit 1; \
	done
	$(MUSL_CC) -std=c11 -D_GNU_SOURCE $(WARN) $(PORT_CFLAGS) -fPIC -shared -Iinclude -I$(ERL_ROOT)/usr/include \
	  -o $(MUSL_DIR)/kprof_tracer.so nif/kprof_tracer_nif.c -lpthread
	@echo "check-musl: $(words $(CORE_SRC) port/main.c) sources of the sink compiled, the NIF built, with musl"
