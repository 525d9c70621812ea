/* sample_replay.c: the sink's work per sample, measured on a recorded
 * session (port/sample/sample_record.c): each sample decoded, named from
 * the perf map as it was, its pid made, and added to a sampled capture's
 * call-path tree (with the top table's counters), as a live drain does.
 * What a live drain also does and this does not: the system calls that read
 * the rings, the map and the VM's memory.
 *
 *   sample_replay FILE [ROUNDS [maponly]]   prints: samples=N rounds=R ns_per_sample=X
 *
 * `maponly' replays the recording without its ring records: the perf map's
 * reads alone (a session's start reads the whole map). Under callgrind
 * (bench/sample_bench.erl runs both, ROUNDS 1), the instructions a sample
 * are the difference of the two runs over N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sample/ks_sample.h"

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  long len;

  if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
      (b = malloc((size_t)len + 1)) == NULL || fread(b, 1, (size_t)len, f) != (size_t)len) {
    if (f != NULL)
      fclose(f);
    free(b);
    return NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* The recording without its 'r' chunks (sample_record.c's format). */
static size_t map_only(unsigned char *rec, size_t n) {
  size_t at, out, tn;

  if (n < 24)
    return n;
  tn = (size_t)rec[20] | (size_t)rec[21] << 8 | (size_t)rec[22] << 16 | (size_t)rec[23] << 24;
  for (at = out = 24 + tn; at + 5 <= n;) {
    size_t len = (size_t)rec[at + 1] | (size_t)rec[at + 2] << 8 | (size_t)rec[at + 3] << 16 |
                 (size_t)rec[at + 4] << 24;
    if (len > n - at - 5)
      break;
    if (rec[at] != 'r') {
      memmove(rec + out, rec + at, 5 + len);
      out += 5 + len;
    }
    at += 5 + len;
  }
  return out;
}

int main(int argc, char **argv) {
  static ks_flame fl;
  static ks_sampling sm;
  ks_intern in;
  ks_fopts o;
  unsigned char *rec;
  size_t n;
  int rounds = argc > 2 ? atoi(argv[2]) : 5, r;
  uint64_t samples = 0;
  struct timespec t0, t1;

  if (argc < 2 || (rec = slurp(argv[1], &n)) == NULL || rounds < 1) {
    fprintf(stderr, "usage: sample_replay FILE [ROUNDS [maponly]]\n");
    return 2;
  }
  if (argc > 3 && strcmp(argv[3], "maponly") == 0)
    n = map_only(rec, n);
  if (ks_intern_init(&in, NULL) != KS_OK)
    return 1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (r = 0; r < rounds; r++) {
    ks_flame_init(&fl);
    ks_fopts_default(&o);
    o.top = 20;
    o.sample_hz = 997;
    if (ks_flame_start(&fl, 1, &o) < 0)
      return 1;
    ks_sampling_init(&sm, &fl, &in);
    sm.id = 1;
    sm.smp.emit = ks_sampling_feed;
    sm.smp.emit_ctx = &sm;
    sm.smp.period_ns = 1000000000 / 997;
    if (ks_srec_replay(&sm.smp, rec, n) != KS_OK)
      fprintf(stderr, "sample_replay: the recording is cut short\n");
    samples += sm.smp.k.samples;
    ks_sampling_free(&sm);
    ks_flame_free(&fl);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("samples=%llu rounds=%d ns_per_sample=%.0f\n", (unsigned long long)samples, rounds,
         ((t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
             (double)(samples ? samples : 1));
  ks_intern_free(&in);
  free(rec);
  return 0;
}
