/* perf_decode.c: perf_event records into samples (ks_perf.h).
 *
 * A sample record, as the kernel writes KS_PERF_SAMPLE_TYPE:
 *
 *   header   u32 type, u16 misc, u16 size
 *   IP       u64
 *   TID      u32 pid, u32 tid
 *   TIME     u64
 *   CALLCHAIN u64 nr, u64 ips[nr]   (context markers among them)
 *   REGS_USER u64 abi, then u64 regs[nregs] when abi != 0
 *
 * Every length is checked against the record's own size before it is read;
 * the fields are read with memcpy (a recorded stream need not be aligned).
 */
#include "ks_perf.h"

static uint64_t load64(const unsigned char *p) {
  uint64_t v;

  memcpy(&v, p, 8);
  return v;
}

static uint32_t load32(const unsigned char *p) {
  uint32_t v;

  memcpy(&v, p, 4);
  return v;
}

int ks_perf_header_read(const unsigned char *p, size_t n, ks_perf_header *h) {
  uint16_t v;

  if (n < 8)
    return KS_EBADTERM;
  h->type = load32(p);
  memcpy(&v, p + 4, 2);
  h->misc = v;
  memcpy(&v, p + 6, 2);
  h->size = v;
  if (h->size < 8 || (h->size & 7) != 0 || h->size > n)
    return KS_EBADTERM;
  return KS_OK;
}

int ks_perf_decode_sample(const unsigned char *p, size_t len, uint32_t nregs, ks_psample *s) {
  size_t at = 8, k;
  uint64_t nr, ip;

  /* ip, pid/tid, time, nr: 32 bytes before the chain. */
  if (len < at + 32 || nregs > 1)
    return KS_EBADTERM;
  s->ip = load64(p + at);
  s->pid = load32(p + at + 8);
  s->tid = load32(p + at + 12);
  s->time = load64(p + at + 16);
  nr = load64(p + at + 24);
  at += 32;
  if (nr > (len - at) / 8)
    return KS_EBADTERM;
  s->chain_nr = (uint32_t)nr;
  s->nips = 0;
  for (k = 0; k < nr; k++) {
    ip = load64(p + at + 8 * k);
    if (ip >= KS_PERF_CONTEXT_MAX)
      continue;   /* PERF_CONTEXT_USER and the other markers */
    if (s->nips < KS_PERF_MAX_CHAIN)
      s->ips[s->nips++] = ip;
  }
  at += 8 * (size_t)nr;
  s->abi = 0;
  s->r13 = 0;
  if (len < at + 8)
    return KS_EBADTERM;
  s->abi = load64(p + at);
  at += 8;
  if (s->abi != 0) {
    if (len < at + 8 * (size_t)nregs)
      return KS_EBADTERM;
    if (nregs > 0)
      s->r13 = load64(p + at);
  }
  return KS_OK;
}

int ks_perf_decode_lost(const unsigned char *p, size_t len, uint64_t *lost) {
  ks_perf_header h;

  if (ks_perf_header_read(p, len, &h) != KS_OK)
    return KS_EBADTERM;
  if (h.type == KS_PERF_RECORD_LOST && h.size >= 24) {
    *lost = load64(p + 16);   /* after the event's id */
    return KS_OK;
  }
  if (h.type == KS_PERF_RECORD_LOST_SAMPLES && h.size >= 16) {
    *lost = load64(p + 8);
    return KS_OK;
  }
  return KS_EBADTERM;
}
