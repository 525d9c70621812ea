/* test_util.h: helpers shared by the Check suites: terms built with ei, events as text. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <check.h>
#include <ei.h>

#include "ks_ring.h"
#include "proto/ks_proto.h"
#include "sink/ks_sink.h"

/* A frame under construction: version byte written by tb_begin. */
void tb_begin(ei_x_buff *x);
void tb_atom(ei_x_buff *x, const char *a);
void tb_atom_as(ei_x_buff *x, const char *a, erlang_char_encoding enc);
void tb_pid(ei_x_buff *x, const char *node, unsigned num, unsigned serial, unsigned creation);
void tb_mfa(ei_x_buff *x, const char *m, const char *f, int arity);
/* Interns M:F/A (UTF-8 atoms) or the pid <0.num.0>@n@h; fails the test on error. */
uint32_t tb_intern_mfa(ks_intern *in, const char *m, const char *f, uint32_t arity);
uint32_t tb_intern_pid(ks_intern *in, unsigned num);
/* A timestamped event as the decoder makes it for the tiers: kind, pid id, ts (ns),
 * MFA and caller ids (KS_NONE: none), a 2-byte label (NULL: no token) and a payload. */
void tb_tier_event(ks_decoded *d, int kind, uint32_t pid, int64_t ts, uint32_t mfa,
                   uint32_t caller, const unsigned char *label, const unsigned char *payload,
                   size_t plen);
/* Wraps x's bytes in a 4-byte length prefix (into out, caller frees). */
unsigned char *tb_framed(const ei_x_buff *x, size_t *len);

/* One decoded frame as the line the recorder writes (see test/data/README.md). */
void event_line(const ks_intern *in, int rc, const ks_decoded *d, char *out, size_t cap);

/* Collects whatever the sink emits. */
typedef struct tb_out {
  unsigned char *buf;
  size_t len, cap;
  int frames;
} tb_out;
void tb_out_emit(void *ctx, const unsigned char *frame, size_t len);
/* The k-th emitted reply's third element printed with ei_s_print_term (caller frees). */
char *tb_out_reply(const tb_out *o, int k);
void tb_out_free(tb_out *o);

/* A sink whose frames go to out (emptied here), with options o (NULL: the
 * defaults); fails the test if it cannot start. tb_sink_close frees both. */
void tb_sink_open(ks_sink *s, const ks_sink_opts *o, tb_out *out);
void tb_sink_close(ks_sink *s, tb_out *out);
/* Frames x, feeds it to s, which must take it (KS_OK), and frees x. */
void tb_feed(ks_sink *s, ei_x_buff *x);
/* Begins x with {kprof, Ref, {Name, ...}}: a command tuple of arity elements,
 * its name written; the caller encodes the arity - 1 arguments. */
void tb_cmd_begin(ei_x_buff *x, long ref, const char *name, int arity);
/* A capture's commands: {flame_pids, Id, [{Pid, undefined}]} for the
 * processes <n@h.A.0> and, unless B is 0, <n@h.B.0>; {flame_write, Id,
 * 2000000, Dir, Base, [folded, svg]}. */
void tb_flame_pids(ks_sink *s, long ref, long id, unsigned a, unsigned b);
void tb_flame_write(ks_sink *s, long ref, long id, const char *dir, const char *base);

/* A new private directory /tmp/kprof-What-XXXXXX, its name in dir (cap bytes);
 * tb_tmpdir_remove removes it and whatever is in it. */
void tb_tmpdir(char *dir, size_t cap, const char *what);
void tb_tmpdir_remove(const char *dir);

/* An atom's name record in w's ring, as the tracer NIF writes one (ks_rec_atom).
 * Its position. */
uint64_t tb_ring_atom(ks_ring_writer *w, uint64_t word, const char *name);

/* Puts the calling process in a mount namespace of its own, all of it
 * private (a mount made there stays there): as root a mount namespace,
 * otherwise a user namespace too. 0, or the errno of the step that failed. */
int tb_private_mounts(void);

/* Reads a whole file; NULL if missing. */
unsigned char *read_file(const char *path, size_t *len);
const char *test_data_dir(void);

Suite *frame_suite(void);
Suite *etf_suite(void);
Suite *intern_suite(void);
Suite *hmap_suite(void);
Suite *decode_suite(void);
Suite *replay_suite(void);
Suite *control_suite(void);
Suite *tiers_suite(void);
Suite *flame_suite(void);
Suite *ring_suite(void);
Suite *vm_clock_suite(void);
Suite *full_trace_suite(void);
Suite *overload_suite(void);
Suite *stack_suite(void);
Suite *options_suite(void);
Suite *consumer_suite(void);
Suite *budget_suite(void);
Suite *out_dir_suite(void);
Suite *main_suite(void);
Suite *record_suite(void);
Suite *sample_suite(void);
Suite *sample_sink_suite(void);

#endif
