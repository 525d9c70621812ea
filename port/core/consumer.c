/* consumer.c: the features that take trace events, registered once (ks_consumer.h). */
#include "ks_consumer.h"

int ks_consumers_add(ks_consumers *cs, const ks_consumer *c) {
  if (cs->n >= KS_CONSUMERS_MAX)
    return KS_EFULL;
  c->sw->mask = &cs->on;
  c->sw->bit = 1u << cs->n;
  ks_switch_set(c->sw, *c->active);
  cs->c[cs->n++] = *c;
  return KS_OK;
}

void ks_consumers_pin_pids(const ks_consumers *cs, uint8_t *pin, uint32_t n) {
  uint32_t k;

  for (k = 0; k < cs->n; k++)
    cs->c[k].pin_pids(cs->c[k].self, pin, n);
}

void ks_consumers_forget_pids(const ks_consumers *cs, const uint8_t *dead, uint32_t n) {
  uint32_t k;

  for (k = 0; k < cs->n; k++)
    cs->c[k].forget_pids(cs->c[k].self, dead, n);
}

void ks_consumers_reset(const ks_consumers *cs) {
  uint32_t k;

  for (k = 0; k < cs->n; k++)
    if (cs->c[k].reset != NULL)
      cs->c[k].reset(cs->c[k].self);
}

void ks_consumers_free(ks_consumers *cs) {
  uint32_t k;

  for (k = 0; k < cs->n; k++) {
    cs->c[k].free(cs->c[k].self);
    cs->c[k].sw->mask = NULL;   /* untied: the mask goes with cs */
  }
  cs->n = 0;
  cs->on = 0;
}
