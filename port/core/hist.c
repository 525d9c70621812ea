/* hist.c: log-linear histograms: record, merge and quantiles with a bounded error. */
#include <stdlib.h>

#include "ks_hist.h"

void ks_hist_init(ks_hist *h) {
  memset(h, 0, sizeof(*h));
}

void ks_hist_free(ks_hist *h) {
  free(h->buckets);
  memset(h, 0, sizeof(*h));
}

void ks_hist_reset(ks_hist *h) {
  uint32_t *b = h->buckets;

  memset(h, 0, sizeof(*h));
  if (b != NULL)
    memset(b, 0, KS_HIST_BUCKETS * sizeof(*b));
  h->buckets = b;
}

uint32_t ks_hist_bucket(uint64_t v) {
  int msb, shift;

  if (v < KS_HIST_LINEAR)
    return (uint32_t)v;
  msb = 63 - __builtin_clzll(v);           /* >= 6 */
  shift = msb - 5;                          /* v >> shift is in [32, 63] */
  return KS_HIST_LINEAR + (uint32_t)(msb - 6) * KS_HIST_SUB +
         (uint32_t)((v >> shift) - KS_HIST_SUB);
}

uint64_t ks_hist_bucket_low(uint32_t b) {
  uint32_t octave, sub;

  if (b < KS_HIST_LINEAR)
    return b;
  octave = (b - KS_HIST_LINEAR) / KS_HIST_SUB;   /* msb - 6 */
  sub = (b - KS_HIST_LINEAR) % KS_HIST_SUB;
  return (uint64_t)(KS_HIST_SUB + sub) << (octave + 1);
}

uint64_t ks_hist_bucket_high(uint32_t b) {
  if (b < KS_HIST_LINEAR)
    return b;
  return ks_hist_bucket_low(b) + ((uint64_t)1 << ((b - KS_HIST_LINEAR) / KS_HIST_SUB + 1)) - 1;
}

static int ensure(ks_hist *h) {
  if (h->buckets == NULL) {
    h->buckets = calloc(KS_HIST_BUCKETS, sizeof(*h->buckets));
    if (h->buckets == NULL)
      return KS_ENOMEM;
  }
  return KS_OK;
}

int ks_hist_record(ks_hist *h, uint64_t v) {
  uint32_t b;

  if (ensure(h) != KS_OK)
    return KS_ENOMEM;
  b = ks_hist_bucket(v);
  if (h->buckets[b] == UINT32_MAX)
    return KS_EFULL;   /* 4 billion in one bucket: count it as a drop */
  h->buckets[b]++;
  if (h->count == 0 || v < h->min)
    h->min = v;
  if (v > h->max)
    h->max = v;
  h->count++;
  h->total += v;
  return KS_OK;
}

int ks_hist_merge(ks_hist *into, const ks_hist *from) {
  uint32_t b;

  if (from->count == 0)
    return KS_OK;
  if (ensure(into) != KS_OK)
    return KS_ENOMEM;
  for (b = 0; b < KS_HIST_BUCKETS; b++) {
    uint64_t s = (uint64_t)into->buckets[b] + from->buckets[b];
    into->buckets[b] = s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
  }
  if (into->count == 0 || from->min < into->min)
    into->min = from->min;
  if (from->max > into->max)
    into->max = from->max;
  into->count += from->count;
  into->total += from->total;
  return KS_OK;
}

/* The rank-th smallest value lies in the bucket where the running count reaches it. */
uint64_t ks_hist_quantile(const ks_hist *h, double q) {
  uint64_t rank, seen = 0, mid;
  uint32_t b;

  if (h->count == 0 || h->buckets == NULL)
    return 0;
  if (q <= 0)
    return h->min;
  if (q >= 1)
    return h->max;
  rank = (uint64_t)(q * (double)h->count + 0.5);
  if (rank < 1)
    rank = 1;
  for (b = 0; b < KS_HIST_BUCKETS; b++) {
    seen += h->buckets[b];
    if (seen >= rank)
      break;
  }
  if (b == KS_HIST_BUCKETS)
    return h->max;
  mid = ks_hist_bucket_low(b) + (ks_hist_bucket_high(b) - ks_hist_bucket_low(b)) / 2;
  /* Never outside what was seen. */
  if (mid < h->min)
    mid = h->min;
  if (mid > h->max)
    mid = h->max;
  return mid;
}
