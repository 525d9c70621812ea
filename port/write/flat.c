/* flat.c: the flat profile, one line per function, tab-separated: its calls, self
 * and inclusive time (ns), most self time first, for a spreadsheet, sort or awk
 * (doc/flame.md, "The formats"). From the written tree, as the other files are:
 * its times, and its nodes' calls (callgrind's calls=) summed per function. */
#include <stdlib.h>

#include "ks_write.h"

/* A name as one TSV field: tab, newline, CR and backslash escaped (\t \n \r \\). */
static void put_field(FILE *f, const char *s, size_t n) {
  size_t k;

  for (k = 0; k < n; k++) {
    if (s[k] == '\t')
      fputs("\\t", f);
    else if (s[k] == '\n')
      fputs("\\n", f);
    else if (s[k] == '\r')
      fputs("\\r", f);
    else if (s[k] == '\\')
      fputs("\\\\", f);
    else
      fputc(s[k], f);
  }
}

/* Calls per MFA id, from the tree's nodes: *cap ids (NULL without memory);
 * *rows: whether a function has calls or time (a row of ks_ftree_mfas). */
static uint64_t *calls_of(const ks_fout *o, uint32_t *cap, int *rows) {
  const ks_ftree *tr = &o->g->tree;
  uint64_t *calls;
  uint32_t k, ids = 0;

  for (k = 1; k < tr->n; k++)
    if (KS_FR_KIND(tr->v[k].frame) == KS_FR_MFA && KS_FR_VAL(tr->v[k].frame) + 1 > ids)
      ids = KS_FR_VAL(tr->v[k].frame) + 1;
  *cap = ids;
  if ((calls = calloc(ids + 1, sizeof(*calls))) == NULL)
    return NULL;
  *rows = 0;
  for (k = 1; k < tr->n; k++)
    if (KS_FR_KIND(tr->v[k].frame) == KS_FR_MFA) {
      calls[KS_FR_VAL(tr->v[k].frame)] += tr->v[k].calls;
      *rows |= tr->v[k].calls > 0 || o->total[k] > 0;
    }
  return calls;
}

int ks_write_flat(const ks_fout *o, FILE *f) {
  const ks_ftree *tr = &o->g->tree;
  char name[1024];
  uint64_t *calls;
  ks_fmfa *rows;
  uint32_t n = 0, k, cap;
  size_t len;
  int want;

  if ((calls = calls_of(o, &cap, &want)) == NULL)
    return KS_ENOMEM;
  rows = ks_ftree_mfas(tr, o->total, calls, cap, KS_FMFA_BY_SELF, &n);
  free(calls);
  if (rows == NULL && want)
    return KS_ENOMEM;
  fputs("function\tcalls\tself_ns\tinclusive_ns\n", f);
  for (k = 0; k < n; k++) {
    len = ks_callpath_frame_name(o->g, o->in, KS_FR(KS_FR_MFA, rows[k].mfa), name, sizeof(name));
    put_field(f, name, len);
    fprintf(f, "\t%llu\t%llu\t%llu\n", (unsigned long long)rows[k].calls,
            (unsigned long long)rows[k].self, (unsigned long long)rows[k].incl);
  }
  free(rows);
  return ferror(f) ? KS_EINVAL : KS_OK;
}
