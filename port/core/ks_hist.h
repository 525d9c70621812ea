/* ks_hist.h: log-linear (HDR-style) histograms of nanosecond durations. */
#ifndef KS_HIST_H
#define KS_HIST_H

#include "ks.h"

/*
 * Values below 64 have a bucket each; above, every power of two is cut into 32
 * equal buckets, so a bucket is at most 1/32 of its values wide and a quantile
 * read at a bucket's midpoint is within 1/64 (1.6 %) of the true value.
 * The layout is fixed, so histograms of different sinks and nodes merge
 * exactly by adding counts (kprof_hist.erl reads the same layout).
 */
#define KS_HIST_LINEAR 64
#define KS_HIST_SUB 32
#define KS_HIST_BUCKETS (KS_HIST_LINEAR + (63 - 6 + 1) * KS_HIST_SUB)

typedef struct ks_hist {
  uint64_t count, total;
  uint64_t min, max;
  uint32_t *buckets;     /* KS_HIST_BUCKETS counts, allocated on first record */
} ks_hist;

void ks_hist_init(ks_hist *h);
void ks_hist_free(ks_hist *h);
void ks_hist_reset(ks_hist *h);
int ks_hist_record(ks_hist *h, uint64_t v);
int ks_hist_merge(ks_hist *into, const ks_hist *from);
/* q in [0, 1]: the value at that quantile (a bucket midpoint; exact below 64). */
uint64_t ks_hist_quantile(const ks_hist *h, double q);
uint32_t ks_hist_bucket(uint64_t v);
uint64_t ks_hist_bucket_low(uint32_t b);
uint64_t ks_hist_bucket_high(uint32_t b);   /* inclusive */

#endif
