/* ks_consumer.h: what the sink's core knows of a feature that takes trace
 * events (the tiers, the flame captures): one interface, registered once; the
 * core loops over the consumers and names none of them (port/core/consumer.c). */
#ifndef KS_CONSUMER_H
#define KS_CONSUMER_H

#include "ks_decode.h"

/* A feature's switch: while it is on, the feature takes events. The feature
 * holds one and sets it whenever it starts or stops (ks_switch_set, beside
 * its own state); registering the feature ties the switch to one bit of the
 * consumers' mask, so that with no feature on the sink's cost per event is one
 * test. A switch tied to nothing (a feature used alone: a test, a bench) is
 * set for nothing. */
typedef struct ks_switch {
  uint32_t *mask;        /* the consumers' `on' (NULL: not registered) */
  uint32_t bit;
} ks_switch;

static inline void ks_switch_set(const ks_switch *sw, int on) {
  if (sw->mask != NULL)
    *sw->mask = on ? *sw->mask | sw->bit : *sw->mask & ~sw->bit;
}

typedef struct ks_consumer {
  const char *name;      /* for the reader: "tiers", "flame" */
  void *self;            /* the feature's state, handed to every function */
  const int *active;     /* the feature's own state: nonzero while it takes events */
  ks_switch *sw;         /* the feature's switch, tied to the mask when added; the
                          * feature keeps it equal to *active != 0 */
  /* One decoded event (the core counted it and checked the limits). */
  void (*event)(void *self, const ks_intern *in, const ks_decoded *d);
  /* pin[id] = 1 for every pid id it still refers to (of n): such an exited
   * process keeps its id (port/sink/pid_reclaim.c). */
  void (*pin_pids)(const void *self, uint8_t *pin, uint32_t n);
  /* dead[id] != 0: that id was released; drop whatever is kept per id. */
  void (*forget_pids)(void *self, const uint8_t *dead, uint32_t n);
  /* The sink's `reset': its counters start again (NULL: it has none). */
  void (*reset)(void *self);
  /* Everything it holds is freed (the sink's end). */
  void (*free)(void *self);
} ks_consumer;

#define KS_CONSUMERS_MAX 4

typedef struct ks_consumers {
  ks_consumer c[KS_CONSUMERS_MAX];
  uint32_t n;
  uint32_t on;           /* bit k: consumer k is on (its switch) */
} ks_consumers;

/* Ties c's switch to bit n of the mask, on when *active is nonzero already;
 * KS_EFULL past KS_CONSUMERS_MAX. */
int ks_consumers_add(ks_consumers *cs, const ks_consumer *c);
void ks_consumers_pin_pids(const ks_consumers *cs, uint8_t *pin, uint32_t n);
void ks_consumers_forget_pids(const ks_consumers *cs, const uint8_t *dead, uint32_t n);
void ks_consumers_reset(const ks_consumers *cs);
void ks_consumers_free(ks_consumers *cs);

/* Per event: inline, the sink's hottest loop; the consumers that are on, in
 * the order they were added. With none on it is the one test of the mask. */
static inline void ks_consumers_event(const ks_consumers *cs, const ks_intern *in,
                                      const ks_decoded *d) {
  uint32_t m = cs->on, k;

  while (m != 0) {
    k = (uint32_t)__builtin_ctz(m);
    m &= m - 1;
    cs->c[k].event(cs->c[k].self, in, d);
  }
}

#endif
