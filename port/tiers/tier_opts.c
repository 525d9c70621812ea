/* tier_opts.c: the tiers' options (ks_tier_opts): where the table's tiers rows
 * go, and their defaults. */
#include "ks_tiers.h"

/* The tiers rows' fields in ks_tier_opts (KS_FIELD(tiers, ...) in include/ks_options.h). */
#define KS_FIELD_tiers(m, scale) KS_OPTION_FIELD(ks_tier_opts, m, scale)
#define KS_FIELD_flame(m, scale) KS_OPTION_NO_FIELD
#define KS_FIELD_sample(m, scale) KS_OPTION_NO_FIELD
const ks_option_field ks_tier_fields[] = {
#include "proto/ks_option_fields.h"
};
#undef KS_FIELD_sample
#undef KS_FIELD_flame
#undef KS_FIELD_tiers
_Static_assert(sizeof(ks_tier_fields) / sizeof(ks_tier_fields[0]) == KS_NOPTIONS,
               "one field per row");

/* Requests in flight by default: the table's max_inflight, but the fuzzer
 * builds with fewer (every input starts the tiers afresh). */
void ks_tiers_default_opts(ks_tier_opts *o) {
  memset(o, 0, sizeof(*o));
  ks_option_defaults(KS_M_TIERS, ks_tier_fields, o);
  o->slow_ns = UINT64_MAX;   /* slow_us has no default: no request is slow */
#ifdef KS_TIERS_INFLIGHT
  o->max_inflight = KS_TIERS_INFLIGHT;
#endif
}
