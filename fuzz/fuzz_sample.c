/* fuzz_sample.c: libFuzzer target for what the sampler reads from the
 * kernel and the VM (port/sample/): perf records, a ring, the perf map, a
 * session's recording. The first byte picks the path, the rest is the input:
 *
 *   0  perf records as a ring holds them, through ks_sampler_record and
 *      ks_sampler_resolve against a fixed map and a made-up VM memory (every
 *      word it asks for reads as a pid of OTP 27's layout);
 *   1  the same records copied into a 4 KiB ring at an offset the input's
 *      second byte gives (so records straddle its end) and drained;
 *   2  perf map text, fed in pieces the input's bytes cut, committed at
 *      growing times, then looked up at every address a line names;
 *   3  a recording (sample_record.c's format), replayed.
 *
 * Every stack handed out must have a frame per name it holds, each an MFA id
 * of the intern table; a pid it names must be in the pid table; counters
 * never say more samples were kept than were read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/ks_sample.h"

static ks_intern in;
static ks_sampler smp;
static int ready;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_sample: %s\n", what);
  abort();
}

static void check_stack(void *ctx, const ks_sstack *st) {
  ks_mfa_view m;
  ks_pid_view p;
  uint32_t k;

  if (st->n == 0 || st->n > KS_PERF_MAX_CHAIN + 1)
    fail("frame count");
  for (k = 0; k < st->n; k++)
    if (ks_intern_mfa_get(&in, st->mfas[k], &m) != KS_OK)
      fail("a frame that is no MFA id");
  if (st->pid != KS_NONE && ks_intern_pid_get(&in, st->pid, &p) != KS_OK)
    fail("a pid that is no pid id");
}

/* Every word reads as <0.(addr >> 4) & 0xffff.0> in OTP 27's layout; addresses
 * below 4096 are not mapped. */
static int fake_read(void *ctx, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  uint32_t k;

  for (k = 0; k < n; k++) {
    ok[k] = addrs[k] >= 4096;
    out[k] = ((addrs[k] >> 4) & 0xffff) << 7 | 3;
  }
  return (int)n;
}

static const char map_text[] = "0x1000 100 $app:main/0\n0x1100 100 $app:work/1\n"
                               "0x1200 100 $global::gc_shared\n0x1300 40 $erts_beamasm:normal_exit/0\n";

static void setup(void) {
  ks_intern_limits lim = {4096, 4096, 4096};

  if (ks_intern_init(&in, &lim) != KS_OK)
    fail("intern");
  ready = 1;
}

/* A fresh sampler with the fixed map, the fake VM and OTP 27's layout. */
static void fresh(void) {
  static const unsigned char tmpl[] = {88, 100, 0, 3, 'n', '@', 'h', 0, 0, 0, 1,
                                       0, 0, 0, 0, 0, 0, 0, 1};

  ks_sampler_free(&smp);
  ks_sampler_init(&smp, &in);
  memcpy(smp.pid_tmpl, tmpl, sizeof(tmpl));
  smp.pid_tmpl_n = sizeof(tmpl);
  smp.lay = (ks_playout){1, 0, 7, 28, 32};
  smp.max_stack = 127;
  smp.windowed = 1;
  smp.read_words = fake_read;
  smp.emit = check_stack;
  ks_pmap_feed(&smp.map, map_text, sizeof(map_text) - 1, ks_sampler_name, &smp);
  ks_pmap_commit(&smp.map, 0);
}

static void on_record(void *ctx, const unsigned char *rec, size_t len) {
  ks_sampler_record(&smp, KS_THR_SCHED, rec, len);
}

/* The records as they come, each whole or the rest skipped. */
static void records(const uint8_t *p, size_t n) {
  ks_perf_header h;

  while (n >= 8 && ks_perf_header_read(p, n, &h) == KS_OK) {
    on_record(NULL, p, h.size);
    p += h.size;
    n -= h.size;
  }
  ks_sampler_resolve(&smp);
}

static void ring(const uint8_t *p, size_t n) {
  static unsigned char data[4096];
  uint64_t head, tail, k;
  ks_pring r = {&head, &tail, data, sizeof(data), NULL, 0, 0};

  if (n < 1)
    return;
  tail = head = p[0] * 8;
  p++, n--;
  if (n > sizeof(data))
    n = sizeof(data);
  for (k = 0; k < n; k++)
    data[(head + k) % sizeof(data)] = p[k];
  head += n & ~7ull;
  ks_pring_drain(&r, on_record, NULL);
  if (tail != head)
    fail("the ring was not read to its head");
  ks_sampler_resolve(&smp);
  ks_pring_free(&r);
}

static uint32_t name_any(void *ctx, const ks_pname *nm) {
  return ks_sampler_name(ctx, nm);
}

static void map(const uint8_t *p, size_t n) {
  ks_pmap m;
  size_t at = 0, cut;
  int64_t t = 0;
  uint32_t k;

  ks_pmap_init(&m);
  while (at < n) {
    cut = 1 + p[at] % 97;
    if (cut > n - at)
      cut = n - at;
    ks_pmap_feed(&m, (const char *)p + at, cut, name_any, &smp);
    if (p[at] & 1)
      ks_pmap_commit(&m, t += 10);
    at += cut;
  }
  ks_pmap_commit(&m, t += 10);
  for (k = 0; k < m.n; k++) {
    if (k > 0 && m.cur[k].start < m.cur[k - 1].end)
      fail("the map's current lines overlap");
    ks_pmap_lookup(&m, m.cur[k].start, t);
    if (m.cur[k].since > INT64_MIN)
      ks_pmap_lookup(&m, m.cur[k].end - 1, m.cur[k].since - 1);
  }
  for (k = 0; k < m.nold; k++)
    if (m.old[k].until <= m.old[k].since)
      fail("a retired line that was never valid");
  ks_pmap_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ready)
    setup();
  if (size < 1)
    return 0;
  fresh();
  switch (data[0] % 4) {
  case 0:
    records(data + 1, size - 1);
    break;
  case 1:
    ring(data + 1, size - 1);
    break;
  case 2:
    map(data + 1, size - 1);
    break;
  default:
    ks_srec_replay(&smp, data + 1, size - 1);
    break;
  }
  if (smp.k.samples > smp.k.read)
    fail("more samples kept than read");
  if (in.n_mfas > 4096 || ks_intern_pids_live(&in) > 4096)
    fail("a table past its cap");
  return 0;
}
