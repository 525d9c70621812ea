/* fuzz_record.c: libFuzzer target for the reader and the replay of recorded captures
 * (port/record/record_read.c, record_keys.c, replay.c, replay_opts.c).
 *
 * First byte with bit 7 set: the rest is a replay's options (replay_opts.c), with
 * bit 6 kprof_sink --replay's arguments (NUL-separated), else flame_replay's option
 * list (term_to_binary); no override may land outside its row's bounds.
 * Otherwise, first byte even: the rest is a whole file as given (header, zstd frames): the
 * header's checks, zstd's errors, files cut anywhere. First byte odd: the rest is
 * a stream of ops that the harness puts behind a valid header (options from the
 * next byte) in one zstd frame, so that the fuzzer spends its time on the ops'
 * decoding and on the replay (ids never defined, events of processes in no
 * capture, a proc op of a pid already there, finish twice, ...). Whatever the
 * input, ks_replay_mem must return, and a capture it made is written in the
 * folded and callgrind formats to memory streams (the totals must agree). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "record/ks_record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A valid header: a few options from byte o, then no trigger. */
static size_t header(unsigned char *p, unsigned o) {
  uint32_t v = KS_REC_VERSION, seg = 0, len;
  size_t n = 20;

  n += ks_record_put_varint(p + n, KS_RKEY_children);
  n += ks_record_put_varint(p + n, o & 1);
  n += ks_record_put_varint(p + n, KS_RKEY_callers);
  n += ks_record_put_varint(p + n, (o >> 1) & 1);
  n += ks_record_put_varint(p + n, KS_RKEY_group);
  n += ks_record_put_varint(p + n, (o >> 2) & 3);
  n += ks_record_put_varint(p + n, KS_RKEY_top);
  n += ks_record_put_varint(p + n, (o >> 4) & 1 ? 5 : 0);
  n += ks_record_put_varint(p + n, KS_RKEY_correct_ns);
  n += ks_record_put_varint(p + n, (o >> 5) * 100u);
  n += ks_record_put_varint(p + n, KS_RKEY_max_bytes);
  n += ks_record_put_varint(p + n, 1u << 16);
  memcpy(p, KS_REC_MAGIC, 8);
  ks_record_put_u32le(p + 8, v);
  ks_record_put_u32le(p + 12, seg);
  len = (uint32_t)(n - 20);
  ks_record_put_u32le(p + 16, len);
  return n;
}

/* The capture's graph in one format into memory: the bytes written. */
static size_t write_mem(const ks_fout *o, int (*w)(const ks_fout *, FILE *)) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);

  if (f == NULL)
    return 0;
  w(o, f);
  fclose(f);
  free(buf);
  return len;
}

static void write_outputs(ks_replay *rp) {
  ks_fcap *c = rp->c;
  uint64_t *total;
  ks_fout o;

  ks_callpath_correct(&c->cp);
  ks_ftree_order(&c->cp.tree);
  total = malloc((size_t)c->cp.tree.n * sizeof(*total));
  if (total == NULL)
    return;
  ks_ftree_totals(&c->cp.tree, total);
  o.g = &c->cp;
  o.in = &rp->in;
  o.total = total;
  o.grand = total[0];
  if (o.grand > 0) {
    write_mem(&o, ks_write_folded);
    write_mem(&o, ks_write_callgrind);
  }
  free(total);
}

/* A replay's options (port/record/replay_opts.c): data as flame_replay's option list
 * (term_to_binary), or as kprof_sink --replay's arguments (NUL-separated); what was
 * decoded applied to a capture's options. */
static void options(const uint8_t *data, size_t size, int argv_form) {
  static char buf[4096];
  char *argv[64];
  ks_replay_opts ro;
  ks_fopts o;
  ks_fdest d;
  int idx = 0, ver, n = 0, k, argc = 0;

  if (size >= sizeof(buf))
    return;
  memcpy(buf, data, size);
  buf[size] = 0;
  memset(&d, 0, sizeof(d));
  ks_replay_default_opts(&ro);
  if (argv_form) {
    for (k = 0; k < (int)size && argc < 64; k += (int)strlen(buf + k) + 1)
      argv[argc++] = buf + k;
    for (k = 0; k < argc; k++)
      if (strncmp(argv[k], "--", 2) == 0 && ks_replay_opt_arg(argc, argv, &k, &d, &ro) != KS_OK)
        break;
  } else if (ei_decode_version(buf, &idx, &ver) == 0 && ei_decode_list_header(buf, &idx, &n) == 0) {
    for (k = 0; k < n && idx < (int)size; k++)
      if (ks_replay_opt_term(buf, &idx, &d, &ro) != KS_OK)
        break;
  }
  ks_fopts_default(&o);
  ks_replay_override(&ro, &o);
  if (o.group < KS_GROUP_PID || o.group > KS_GROUP_ALL || o.top > 100000 ||
      o.max_bytes < (1u << 16))
    abort();   /* an override past its row's bounds */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned char file[20 + 256 + 70000 + 1024];
  ks_replay_opts ro;
  ks_replay rp;
  size_t n;
  int rc;

  if (size < 2 || size > 65536)
    return 0;
  if (data[0] & 0x80) {   /* the options, not a file */
    options(data + 1, size - 1, data[0] & 0x40);
    return 0;
  }
  ks_replay_default_opts(&ro);
  if (data[0] & 1) {
    n = header(file, data[1]);
    n += ZSTD_compress(file + n, sizeof(file) - n, data + 2, size - 2, 1);
    rc = ks_replay_mem(&rp, file, n, &ro);
  } else {
    rc = ks_replay_mem(&rp, data + 1, size - 1, &ro);
  }
  if (rc == KS_OK && rp.c == NULL)
    abort();   /* KS_OK is a capture */
  if (rp.c != NULL)
    write_outputs(&rp);
  ks_replay_free(&rp);
  return 0;
}
