/* record_keys.c: a recording header's keys (include/ks_options.h's
 * KS_RECORD_KEY lines): each key's flame row and field, its value as the
 * writer puts it (record_write.c) and as the reader checks and stores it
 * (record_read.c), in the row's bounds. */
#include <limits.h>

#include "ks_record.h"

static const struct {
  unsigned id;
  const char *key;
} keys[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all)
#define KS_RECORD_KEY(id, key) {(id), #key},
#include "ks_options.h"
#undef KS_RECORD_KEY
#undef KS_FORMAT
#undef KS_OPTION
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

int ks_record_key_at(size_t i, ks_record_key *k) {
  const ks_option *o;

  if (i >= NKEYS || (o = ks_option_find(KS_M_FLAME, keys[i].key)) == NULL ||
      ks_flame_fields[o - ks_options].size == 0)
    return KS_EINVAL;
  k->id = keys[i].id;
  k->row = o;
  k->field = &ks_flame_fields[o - ks_options];
  return KS_OK;
}

int ks_record_key_of(unsigned id, ks_record_key *k) {
  size_t i;

  for (i = 0; i < NKEYS; i++)
    if (keys[i].id == id)
      return ks_record_key_at(i, k);
  return KS_EINVAL;
}

/* A signed row (time_offset) is written zigzagged. */
static int is_signed(const ks_record_key *k) {
  return k->row->min < 0;
}

uint64_t ks_record_key_get(const ks_record_key *k, const ks_fopts *o) {
  uint64_t v = ks_option_load(o, k->field) / k->field->scale;

  if (!is_signed(k))
    return v;
  return ks_record_zigzag(k->field->size == sizeof(int64_t) ? (int64_t)v : (int32_t)v);
}

int ks_record_key_set(const ks_record_key *k, ks_fopts *o, uint64_t v) {
  long long n;

  if (is_signed(k))
    n = ks_record_unzigzag(v);
  else if (v > LLONG_MAX)
    return KS_EINVAL;
  else
    n = (long long)v;
  if (ks_option_check(k->row, n) != KS_OK && !(n == 0 && k->row->def[0] == 0))
    return KS_EINVAL;
  ks_option_store(o, k->field, n);
  return KS_OK;
}
