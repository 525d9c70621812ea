/* ring_record.c: records the ring records the kprof_tracer NIF writes on this
 * OTP, as a seed of fuzz_ring (fuzz/otp_ring.escript drives it; `make
 * fuzz-otp-corpus`).
 *
 *   ring_record OUT
 *
 * Creates the rings as the sink does (ks_ring_open: RINGS rings of 16 MiB,
 * more than the VM has scheduler threads) and prints their shm name on a
 * line. Each line it then reads on stdin ("dump") writes OUT: one 0 byte
 * (fuzz_ring's path for records as given, ks_ring_replay) and each ring's
 * data from position 0 to its head, ring after ring: every record the NIF
 * wrote. The VM runs one scheduler (otp_ring.escript's +S 1), so a word's
 * definition comes before its uses in that order. Answers "wrote BYTES".
 * Exits at end of stdin. A ring must not wrap: OUT is refused (exit 1)
 * past its size.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ks_ring_reader.h"

#define RING_SIZE (16u << 20)
#define RINGS 64u

static int dump(const ks_ring_reader *r, const char *out) {
  uint64_t head[RINGS], total = 0;
  unsigned k;
  FILE *f;
  int ok;

  for (k = 0; k < r->rings; k++) {
    head[k] = atomic_load_explicit(&ks_ring_at(r->h, r->size, k)->head, memory_order_acquire);
    if (head[k] > r->size) {
      fprintf(stderr, "ring_record: %llu bytes written in ring %u, more than it holds\n",
              (unsigned long long)head[k], k);
      return -1;
    }
    total += head[k];
  }
  if ((f = fopen(out, "wb")) == NULL) {
    perror(out);
    return -1;
  }
  ok = putc(0, f) != EOF;
  for (k = 0; k < r->rings && ok; k++)
    ok = fwrite(ks_ring_data(ks_ring_at(r->h, r->size, k)), 1, (size_t)head[k], f) ==
         (size_t)head[k];
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    perror(out);
    return -1;
  }
  printf("wrote %llu\n", (unsigned long long)total);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  ks_ring_reader r;
  char line[64];
  int rc = 0;

  if (argc != 2) {
    fprintf(stderr, "usage: ring_record OUT\n");
    return 2;
  }
  ks_ring_reader_init(&r);
  if (ks_ring_open(&r, RING_SIZE, RINGS) != KS_OK) {
    fprintf(stderr, "ring_record: cannot create a ring\n");
    return 1;
  }
  printf("%s\n", r.name);
  fflush(stdout);
  while (rc == 0 && fgets(line, sizeof(line), stdin) != NULL)
    if (strncmp(line, "dump", 4) == 0)
      rc = dump(&r, argv[1]);
  ks_ring_close(&r);
  return rc == 0 ? 0 : 1;
}
