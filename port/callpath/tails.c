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
 * 64-bit keys, at most KS_FTAILS_MAX pairs (then it learns no new pair).
 */
#include <stdlib.h>

#include "ks_callpath.h"

#define EMPTY UINT64_MAX

static uint64_t key_of(uint32_t a, uint32_t b) {
  return (uint64_t)a << 32 | b;
}

static uint32_t slot(const ks_ftails *t, uint64_t key) {
  uint32_t i = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & t->mask;

  while (t->keys[i] != EMPTY && t->keys[i] != key)
    i = (i + 1) & t->mask;
  return i;
}

int ks_ftails_get(const ks_ftails *t, uint32_t a, uint32_t b) {
  uint64_t key = key_of(a, b);
  uint32_t i;

  if (t->keys == NULL)
    return KS_FTAIL_UNKNOWN;
  i = slot(t, key);
  return t->keys[i] == key ? t->kind[i] : KS_FTAIL_UNKNOWN;
}

static int grow(ks_ftails *t) {
  uint32_t n = t->keys == NULL ? 1024 : (t->mask + 1) * 2, k, old = t->keys ? t->mask + 1 : 0, i;
  uint64_t *keys = malloc((size_t)n * sizeof(*keys)), *was = t->keys;
  uint8_t *kind = malloc(n), *was_kind = t->kind;

  if (keys == NULL || kind == NULL) {
    free(keys);
    free(kind);
    return KS_ENOMEM;
  }
  for (k = 0; k < n; k++)
    keys[k] = EMPTY;
  t->keys = keys;
  t->kind = kind;
  t->mask = n - 1;
  for (k = 0; k < old; k++)
    if (was[k] != EMPTY) {
      i = slot(t, was[k]);
      t->keys[i] = was[k];
      t->kind[i] = was_kind[k];
    }
  free(was);
  free(was_kind);
  return KS_OK;
}

void ks_ftails_set(ks_ftails *t, uint32_t a, uint32_t b, int kind) {
  uint64_t key = key_of(a, b);
  uint32_t i;

  if (a == KS_NONE || b == KS_NONE)
    return;
  if (t->keys != NULL) {
    i = slot(t, key);
    if (t->keys[i] == key) {
      if (t->kind[i] != KS_FTAIL_BODY)   /* once seen as a body call, always one */
        t->kind[i] = (uint8_t)kind;
      return;
    }
  }
  if (t->n >= KS_FTAILS_MAX)
    return;
  if ((t->keys == NULL || (t->n + 1) * 2 > t->mask + 1) && grow(t) != KS_OK)
    return;
  i = slot(t, key);
  t->keys[i] = key;
  t->kind[i] = (uint8_t)kind;
  t->n++;
}

void ks_ftails_free(ks_ftails *t) {
  free(t->keys);
  free(t->kind);
  memset(t, 0, sizeof(*t));
}
