/* ring_record.c: records the ring records the kprof_tracer NIF writes on this
 * OTP, as a seed of fuzz_ring (fuzz/otp_ring.escript drives it; `make
 * fuzz-otp-corpus`).
 *
 *   ring_record OUT
 *
 * Creates a ring as the sink does (ks_ring_open, 16 MiB) and prints its shm
 * name on a line. Each line it then reads on stdin ("dump") writes OUT:
 * one 0 byte (fuzz_ring's path for records as given, ks_ring_replay) and the
 * ring's data from position 0 to its head, every record the NIF wrote, then
 * answers "wrote BYTES". Exits at end of stdin. The ring must not wrap:
 * OUT is refused (exit 1) past its size.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ks_ring_reader.h"

#define RING_SIZE (16u << 20)

static int dump(const ks_ring_reader *r, const char *out) {
  const unsigned char *data = (const unsigned char *)r->h + r->h->hdr_size;
  uint64_t head = atomic_load_explicit(&r->h->head, memory_order_acquire);
  FILE *f;
  int ok;

  if (head > r->size) {
    fprintf(stderr, "ring_record: %llu bytes written, more than the ring holds\n",
            (unsigned long long)head);
    return -1;
  }
  if ((f = fopen(out, "wb")) == NULL) {
    perror(out);
    return -1;
  }
  ok = putc(0, f) != EOF && fwrite(data, 1, (size_t)head, f) == (size_t)head;
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    perror(out);
    return -1;
  }
  printf("wrote %llu\n", (unsigned long long)head);
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
  if (ks_ring_open(&r, RING_SIZE) != KS_OK) {
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
