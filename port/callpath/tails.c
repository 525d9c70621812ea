/* tails.c: which calls the flow rules have seen to be tail calls.
 *
 * Without {caller} a call does not say whether it is a tail call. A
 * return_to does, afterwards: the frames it pops above the one it returns
 * into were one chain of calls, the first a body call from that frame and
 * each next one a tail call out of the one before (the VM sends one
 * return_to per chain). So the flow rules learn, per pair (caller's
 * function, callee's function), what the last chain showed, and take the
 * next such call as a tail call (the callee replaces the caller's frame, as
 * on the BEAM) or a body call. An exception caught further down pops
 * several frames too and may teach a tail call that was not one; the next
 * return of such a pair teaches it back. An open-addressing table of
 * pairs (port/core/ks_hmap.h), at most KS_FTAILS_MAX (then it learns no new pair).
 */
#include "ks_callpath.h"

#define FIRST_SLOTS 1024u

static uint64_t tail_hash(const void *e, const void *ctx) {
  const ks_ftail *t = e;

  return ks_hmap_pair(t->caller, t->callee);
}

/* The pair's entry, or NULL with *slot the empty slot where it goes. */
static inline ks_ftail *find(const ks_ftails *t, uint32_t caller, uint32_t callee, size_t *slot) {
  ks_ftail *e;

  for (e = ks_hmap_run(&t->map, sizeof(*e), ks_hmap_pair(caller, callee), slot); e != NULL;
       e = ks_hmap_step(&t->map, sizeof(*e), slot))
    if (e->caller == caller && e->callee == callee)
      return e;
  return NULL;
}

int ks_ftails_get(const ks_ftails *t, uint32_t caller, uint32_t callee) {
  const ks_ftail *e;
  size_t slot;

  if (t->map.v == NULL || (e = find(t, caller, callee, &slot)) == NULL)
    return KS_FTAIL_UNKNOWN;
  return e->kind;
}

void ks_ftails_set(ks_ftails *t, uint32_t caller, uint32_t callee, int kind) {
  ks_ftail *e;
  size_t slot;

  if (caller == KS_NONE || callee == KS_NONE)
    return;
  if (t->map.v == NULL && ks_hmap_init(&t->map, sizeof(ks_ftail), FIRST_SLOTS) != KS_OK)
    return;
  if ((e = find(t, caller, callee, &slot)) != NULL) {
    if (e->kind != KS_FTAIL_BODY)   /* once seen as a body call, always one */
      e->kind = (uint8_t)kind;
    return;
  }
  if (t->map.n >= KS_FTAILS_MAX)
    return;
  if (ks_hmap_full(&t->map)) {
    if (ks_hmap_grow(&t->map, tail_hash, NULL) != KS_OK)
      return;
    slot = ks_hmap_end(&t->map, sizeof(*e), ks_hmap_pair(caller, callee));
  }
  e = ks_hmap_put(&t->map, sizeof(*e), slot);
  e->caller = caller;
  e->callee = callee;
  e->kind = (uint8_t)kind;
}

void ks_ftails_free(ks_ftails *t) {
  ks_hmap_free(&t->map);
}
