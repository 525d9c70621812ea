/* A C file with dead names in its comments (`make doccheck-selftest`).
 *
 * Live: port/core/frame.c, ks_decode_frame, KS_OPTION, ks_ring.h, erl_nif.h,
 * kprof_opts:check/2, `make check-c`.
 *
 * Dead: port/proto/no_such_file.c, ks_no_such_function, KS_NO_SUCH_MACRO,
 * no_such_header.h, kprof_opts:no_such/1, `make no-such-target`. */
#include <stdio.h>

// Dead in a line comment: port/no_such_dir/x.c
static const char *in_code = "port/no_such_string.c ks_not_checked_in_a_string";

int ks_selftest_not_a_definition_of_the_tree(void) { return in_code[0] + '"'; /* after a literal: ks_dead_after */ }
