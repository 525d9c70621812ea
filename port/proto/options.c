/* options.c: the option table (include/ks_options.h) as the sink's rows, and
 * the one loop that decodes a start command's options and sets their defaults. */
#include <stdlib.h>
#include <string.h>
#include <ei.h>

#include "core/ks.h"
#include "ks_proto.h"

const ks_option ks_options[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc) \
  {(modes), #key, (type), (double)(min), (double)(max), def, (by), doc},
#define KS_FORMAT(name, ext, writer, all)
#include "ks_options.h"
#undef KS_OPTION
#undef KS_FORMAT
};
const size_t ks_noptions = sizeof(ks_options) / sizeof(ks_options[0]);
_Static_assert(sizeof(ks_options) / sizeof(ks_options[0]) == KS_NOPTIONS, "KS_NOPTIONS");

const ks_option_value ks_option_values[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all)
#define KS_VALUE(key, atom, value) {#key, #atom, (value)},
#include "ks_options.h"
#undef KS_VALUE
#undef KS_OPTION
#undef KS_FORMAT
};
const size_t ks_noption_values = sizeof(ks_option_values) / sizeof(ks_option_values[0]);

int ks_option_value_of(const char *key, const char *atom, long long *v) {
  size_t k;

  for (k = 0; k < ks_noption_values; k++)
    if (strcmp(ks_option_values[k].key, key) == 0 && strcmp(ks_option_values[k].atom, atom) == 0) {
      *v = ks_option_values[k].value;
      return KS_OK;
    }
  return KS_EINVAL;
}

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
  size_t k;

  if (o->type == KS_T_ENUM) {
    for (k = 0; k < ks_noption_values; k++)
      if (ks_option_values[k].value == v && strcmp(ks_option_values[k].key, o->key) == 0)
        return KS_OK;
    return KS_EINVAL;
  }
  if (o->type != KS_T_INT && o->type != KS_T_BOOL)
    return KS_EINVAL;
  return d >= o->min && d <= o->max ? KS_OK : KS_EINVAL;
}

uint64_t ks_option_load(const void *opts, const ks_option_field *f) {
  const char *p = (const char *)opts + f->off;
  uint64_t u;
  uint32_t u32;

  if (f->size == sizeof(uint64_t)) {
    memcpy(&u, p, sizeof(u));
    return u;
  }
  memcpy(&u32, p, sizeof(u32));
  return u32;
}

/* v times the row's scale into its field (saturated: slow_us has no bound). */
void ks_option_store(void *opts, const ks_option_field *f, long long v) {
  char *p = (char *)opts + f->off;
  uint64_t u = (uint64_t)v * f->scale;
  uint32_t u32;

  if (v > 0 && f->scale > 1 && u / f->scale != (uint64_t)v)
    u = UINT64_MAX;
  if (f->size == sizeof(uint64_t)) {
    memcpy(p, &u, sizeof(u));
  } else {
    u32 = (uint32_t)u;
    memcpy(p, &u32, sizeof(u32));
  }
}

int ks_option_decode(unsigned mode, const ks_option_field *fields, const char *b, int *idx,
                     void *opts, const ks_option **term) {
  char key[MAXATOMLEN];
  const ks_option *o;
  const ks_option_field *f;
  int ar, flag;
  long long v;

  *term = NULL;
  if (ei_decode_tuple_header(b, idx, &ar) != 0 || ar != 2 || ei_decode_atom(b, idx, key) != 0 ||
      (o = ks_option_find(mode, key)) == NULL)
    return KS_EINVAL;
  f = &fields[o - ks_options];
  if (o->type == KS_T_TERM) {
    *term = o;
    return KS_OK;
  }
  if (f->size == 0)
    return KS_EINVAL;   /* a row of the sink's with no field: the table is wrong */
  if (o->type == KS_T_BOOL) {
    if (ei_decode_boolean(b, idx, &flag) != 0)
      return KS_EINVAL;
    v = flag;
  } else if (o->type == KS_T_ENUM) {
    if (ei_decode_atom(b, idx, key) != 0 || ks_option_value_of(o->key, key, &v) != KS_OK)
      return KS_EINVAL;
  } else if (ei_decode_longlong(b, idx, &v) != 0 || ks_option_check(o, v) != KS_OK) {
    return KS_EINVAL;
  }
  ks_option_store(opts, f, v);
  return KS_OK;
}

int ks_option_parse(const ks_option *o, const ks_option_field *f, const char *text, void *opts) {
  char *end;
  long long v;

  if (f->size == 0)
    return KS_EINVAL;
  if (o->type == KS_T_ENUM) {
    if (ks_option_value_of(o->key, text, &v) != KS_OK)
      return KS_EINVAL;
  } else if (o->type == KS_T_BOOL) {
    if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0)
      return KS_EINVAL;
    v = text[0] == 't';
  } else {
    v = strtoll(text, &end, 10);
    if (o->type != KS_T_INT || end == text || *end != 0 || ks_option_check(o, v) != KS_OK)
      return KS_EINVAL;
  }
  ks_option_store(opts, f, v);
  return KS_OK;
}

int ks_option_default(const ks_option *o, long long *v) {
  char *end;

  if (strcmp(o->def, "true") == 0 || strcmp(o->def, "false") == 0) {
    *v = o->def[0] == 't';
    return KS_OK;
  }
  if (o->type == KS_T_ENUM)
    return o->def[0] != 0 ? ks_option_value_of(o->key, o->def, v) : KS_EINVAL;
  *v = strtoll(o->def, &end, 10);
  return o->def[0] != 0 && *end == 0 ? KS_OK : KS_EINVAL;
}

void ks_option_defaults(unsigned mode, const ks_option_field *fields, void *opts) {
  size_t k;
  long long v;

  for (k = 0; k < ks_noptions; k++)
    if (fields[k].size != 0 && (ks_options[k].modes & mode) &&
        ks_option_default(&ks_options[k], &v) == KS_OK)
      ks_option_store(opts, &fields[k], v);
}
