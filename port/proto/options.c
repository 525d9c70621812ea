/* options.c: the option table (include/ks_options.h) as the sink's rows. */
#include <string.h>

#include "ks.h"
#include "ks_proto.h"

const ks_option ks_options[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, doc) \
  {(modes), #key, (type), (double)(min), (double)(max), def, (by), doc},
#define KS_FORMAT(name, ext, writer)
#include "ks_options.h"
#undef KS_OPTION
#undef KS_FORMAT
};
const size_t ks_noptions = sizeof(ks_options) / sizeof(ks_options[0]);

const ks_option *ks_option_find(unsigned mode, const char *key) {
  size_t k;

  for (k = 0; k < ks_noptions; k++)
    if ((ks_options[k].modes & mode) && (ks_options[k].by & KS_BY_SINK) &&
        strcmp(ks_options[k].key, key) == 0)
      return &ks_options[k];
  return NULL;
}

int ks_option_check(const ks_option *o, long long v) {
  double d = (double)v;

  if (o->type != KS_T_INT && o->type != KS_T_BOOL)
    return KS_EINVAL;
  return d >= o->min && d <= o->max ? KS_OK : KS_EINVAL;
}
