/* ks_opt.h: the sink's view of the option table (include/ks_options.h).
 *
 * ks_option_find gives the row of a key the sink takes in a start command
 * (KS_BY_SINK or KS_BY_BOTH); ks_option_check says whether an integer or
 * boolean value is within the row's bounds. The handlers in tier_control.c
 * and flame_control.c only decode and store: the bounds are the table's.
 */
#ifndef KS_OPT_H
#define KS_OPT_H

#include <stddef.h>

#define KS_INF 1e300   /* no bound; doubles hold every integer bound exactly */

enum { KS_M_TIERS = 1, KS_M_FLAME = 2, KS_M_GUARD = 4 };
enum { KS_T_INT, KS_T_NUM, KS_T_NUMX, KS_T_INTINF, KS_T_BOOL, KS_T_TERM };
enum { KS_BY_ERLANG = 1, KS_BY_SINK = 2, KS_BY_BOTH = 3 };

typedef struct ks_option {
  unsigned modes;
  const char *key;
  int type;
  double min, max;
  const char *def;   /* an Erlang term's text; "" when none */
  int by;
  const char *doc;
} ks_option;

extern const ks_option ks_options[];
extern const size_t ks_noptions;

/* The row of key in a start command of mode (KS_M_TIERS, KS_M_FLAME), or NULL. */
const ks_option *ks_option_find(unsigned mode, const char *key);
/* KS_OK when v is within the row's bounds (KS_T_INT, KS_T_BOOL), else KS_EINVAL. */
int ks_option_check(const ks_option *o, long long v);

#endif
