/* sample_record.c: a sampling session written as it happens (ks_sample.h;
 * sample_replay.c reads it back): the test suites replay real sessions
 * through the same decoder, map and resolver, and a user can send one that
 * names something wrong. Everything the sampler read from the VM is in it, in order: the
 * records of each ring, each read of the perf map with its time, the words
 * read from the VM's memory, and where each drain ended. Not in it: the
 * ELF files (a replay names C code [unknown] unless the same files are
 * there) and the calibration (its result is).
 *
 *   header  "KSR1", then u32: nregs, max_stack, num_bits, ser_bits,
 *           pid template length, then the template's bytes
 *   chunks  u8 type, u32 length, then:
 *     'r'   u32 thread kind, then whole perf records
 *     'm'   i64 time of the read, then the bytes the map gained
 *     'w'   per word read: u64 address, u64 word, u8 ok
 *     'd'   i64 time: the drain's samples are resolved
 *     'l'   u32 offset, u32 shift, i64 start: the window starts (and the
 *           layout, unless the offset is 0xffffffff: none known)
 *     'p'   per process asked for (option pid): u32 number, u32 serial
 * Integers are little-endian.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "ks_sample.h"

static void put(ks_srec *r, const void *p, size_t n) {
  if (r->f != NULL && !r->err && fwrite(p, 1, n, r->f) != n)
    r->err = 1;
}

static void put32(ks_srec *r, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(r, b, 4);
}

static void put64(ks_srec *r, uint64_t v) {
  put32(r, (uint32_t)v);
  put32(r, (uint32_t)(v >> 32));
}

static void chunk(ks_srec *r, char type, size_t len) {
  put(r, &type, 1);
  put32(r, (uint32_t)len);
}

int ks_srec_open(ks_srec *r, const char *path, const ks_sampler *s, const ks_playout *lay) {
  int fd;

  memset(r, 0, sizeof(*r));
  /* A new file, ours alone: never over one that is there. */
  if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
    return KS_EINVAL;
  if ((r->f = fdopen(fd, "wb")) == NULL) {
    close(fd);
    return KS_EINVAL;
  }
  put(r, "KSR1", 4);
  put32(r, s->nregs);
  put32(r, s->max_stack);
  put32(r, lay->num_bits);
  put32(r, lay->ser_bits);
  put32(r, (uint32_t)s->pid_tmpl_n);
  put(r, s->pid_tmpl, s->pid_tmpl_n);
  return r->err ? KS_EINVAL : KS_OK;
}

void ks_srec_ring(ks_srec *r, int kind, const unsigned char *rec, size_t len) {
  chunk(r, 'r', 4 + len);
  put32(r, (uint32_t)kind);
  put(r, rec, len);
}

void ks_srec_map(ks_srec *r, int64_t t, const char *p, size_t n) {
  chunk(r, 'm', 8 + n);
  put64(r, (uint64_t)t);
  put(r, p, n);
}

void ks_srec_words(ks_srec *r, const uint64_t *addr, const uint64_t *word, const uint8_t *ok,
                   uint32_t n) {
  uint32_t k;

  chunk(r, 'w', 17 * (size_t)n);
  for (k = 0; k < n; k++) {
    put64(r, addr[k]);
    put64(r, ok[k] ? word[k] : 0);
    put(r, &ok[k], 1);
  }
}

void ks_srec_drain(ks_srec *r, int64_t t) {
  chunk(r, 'd', 8);
  put64(r, (uint64_t)t);
}

void ks_srec_only(ks_srec *r, const ks_intern *in, const uint32_t *only, uint32_t n) {
  ks_pid_view v;
  uint32_t k;

  chunk(r, 'p', 8 * (size_t)n);
  for (k = 0; k < n; k++) {
    if (ks_intern_pid_get(in, only[k], &v) != KS_OK)
      v.num = v.serial = UINT32_MAX;
    put32(r, v.num);
    put32(r, v.serial);
  }
}

void ks_srec_layout(ks_srec *r, const ks_playout *lay, int64_t from) {
  chunk(r, 'l', 16);
  put32(r, lay->known ? lay->offset : UINT32_MAX);
  put32(r, lay->shift);
  put64(r, (uint64_t)from);
}

int ks_srec_close(ks_srec *r) {
  int err = r->err;

  if (r->f != NULL && fclose(r->f) != 0)
    err = 1;
  r->f = NULL;
  return err ? KS_EINVAL : KS_OK;
}
