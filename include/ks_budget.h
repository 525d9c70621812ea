/* ks_budget.h: a call budget shared by the VM's schedulers (the kprof_tracer NIF).
 *
 * kprof:calls's `max` (erlang/src/kprof_calls.erl): the session's tracer
 * generation may write N call records, no more. Each writer takes one from
 * `left` before it writes; a writer that finds it spent writes nothing and
 * counts the call in `over` (not lost: the session asked for no more), so
 * exactly min(N, calls) records are written however many schedulers race.
 * A budget is for one generation only: a writer of any other (a later
 * session, the tiers) takes nothing, at the cost of one relaxed load, so a
 * budget a session left behind cannot starve the next one.
 *
 * Header only, so the NIF (nif/kprof_tracer_nif.c) and the Check suite
 * (test/c/test_budget.c) share the one implementation.
 */
#ifndef KS_BUDGET_H
#define KS_BUDGET_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct ks_budget {
  _Atomic uint64_t gen;     /* the generation it is for; 0: none */
  _Atomic int64_t left;     /* calls left; below 0 once spent (each taker past it takes one) */
  _Atomic uint64_t over;    /* calls that found it spent */
} ks_budget;

/* Generation gen may write n calls from now (gen 0: no budget); over starts at 0. */
static inline void ks_budget_set(ks_budget *b, uint64_t gen, int64_t n) {
  atomic_store_explicit(&b->gen, 0, memory_order_release);
  atomic_store_explicit(&b->left, n, memory_order_relaxed);
  atomic_store_explicit(&b->over, 0, memory_order_relaxed);
  atomic_store_explicit(&b->gen, gen, memory_order_release);
}

/* 1 when a call of generation gen may be written (one taken, or no budget
 * for gen), 0 when the budget is spent (counted in over). */
static inline int ks_budget_take(ks_budget *b, uint64_t gen) {
  uint64_t g = atomic_load_explicit(&b->gen, memory_order_acquire);

  if (g == 0 || g != gen)
    return 1;
  if (atomic_fetch_sub_explicit(&b->left, 1, memory_order_relaxed) > 0)
    return 1;
  atomic_fetch_add_explicit(&b->over, 1, memory_order_relaxed);
  return 0;
}

/* Calls left (0 once spent). */
static inline uint64_t ks_budget_left(ks_budget *b) {
  int64_t left = atomic_load_explicit(&b->left, memory_order_relaxed);

  return left > 0 ? (uint64_t)left : 0;
}

#endif
