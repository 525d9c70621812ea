/* stack.c: the call-stack model of include/ks_stack.h (its invariants are there). */
#include <stdlib.h>

#include "ks_stack.h"

/* Frames kept in a stack's first allocation. */
#define FIRST_CAP 16

void ks_stack_init(ks_stack *s, size_t elem, uint32_t max) {
  memset(s, 0, sizeof(*s));
  s->elem = (uint32_t)(elem < sizeof(ks_sframe) ? sizeof(ks_sframe) : elem);
  s->max = max;
}

void ks_stack_free(ks_stack *s) {
  free(s->v);
  s->v = NULL;
  s->n = s->cap = s->over = s->pinned = 0;
}

/* Room for one more frame, doubling up to max. */
static int grow(ks_stack *s) {
  uint32_t cap = s->cap ? s->cap * 2 : FIRST_CAP;
  void *v;

  if (cap > s->max || cap < s->cap)
    cap = s->max;
  if ((v = realloc(s->v, (size_t)cap * s->elem)) == NULL)
    return KS_ENOMEM;
  s->v = v;
  s->cap = cap;
  return KS_OK;
}

ks_sframe *ks_stack_push(ks_stack *s, uint32_t mfa, uint32_t base) {
  ks_sframe *f;

  if (s->n >= s->max || s->over > 0 || (s->n == s->cap && grow(s) != KS_OK)) {
    s->over++;
    return NULL;
  }
  f = ks_stack_at(s, s->n++);
  f->mfa = mfa;
  f->base = base;
  return f;
}

/* ---- top rules: the tiers ---- */

int ks_stack_call_top(ks_stack *s, uint32_t mfa, uint32_t caller) {
  ks_sframe *top;

  if (s->over > 0) {
    s->over++;
    return KS_SC_OVER;
  }
  top = ks_stack_top(s);
  if (top != NULL && caller != KS_NONE && caller == top->base && caller != top->mfa) {
    top->mfa = mfa;
    return KS_SC_TAIL;
  }
  return ks_stack_push(s, mfa, caller) != NULL ? KS_SC_PUSH : KS_SC_OVER;
}

uint32_t ks_stack_return_base(ks_stack *s, uint32_t to) {
  uint32_t before = s->n, k;
  int deeper = 0;

  if (s->n == 0)
    return 0;
  if (s->over > 0) {
    s->over--;
    return 0;
  }
  /* Does a frame below the top return to `to`? Then unwind down to it. */
  if (ks_stack_at(s, s->n - 1)->base != to && to != KS_NONE)
    for (k = 0; k + 1 < s->n; k++)
      if (ks_stack_at(s, k)->base == to) {
        deeper = 1;
        break;
      }
  if (!deeper) {
    s->n--;
    return 1;
  }
  while (s->n > 0)
    if (ks_stack_at(s, --s->n)->base == to)
      break;
  return before - s->n;
}

/* ---- search rules: the flame stacks ---- */

/* Frames above n end (leave, top first). */
static void end_above(ks_stack *s, uint32_t n) {
  uint32_t k;

  if (s->leave != NULL)
    for (k = s->n; k-- > n;)
      s->leave(s->leave_ctx, ks_stack_at(s, k)->mfa);
  if (n < s->n)
    s->n = n;
}

void ks_stack_unwind(ks_stack *s) {
  end_above(s, 0);
  ks_stack_clear(s);
}

/* Frames above n are gone without a return_to we saw. */
static void pop_to(ks_stack *s, uint32_t n, uint64_t *lost) {
  if (n < s->n) {
    *lost += s->n - n;
    end_above(s, n);
  }
}

static int push_call(ks_stack *s, uint32_t mfa, uint32_t caller) {
  return ks_stack_push(s, mfa, caller) != NULL ? KS_SC_PUSH : KS_SC_OVER;
}

int ks_stack_call_search(ks_stack *s, uint32_t mfa, uint32_t caller, uint32_t depth,
                         uint64_t *lost) {
  uint32_t j, stop;

  if (s->over > 0) {
    s->over++;
    return KS_SC_OVER;
  }
  if (caller == KS_NONE) {
    if (s->pinned)
      pop_to(s, 1, lost);
    else
      ks_stack_unwind(s);
    return push_call(s, mfa, KS_NONE);
  }
  stop = s->n > depth ? s->n - depth : 0;
  for (j = s->n; j-- > stop;) {
    ks_sframe *f = ks_stack_at(s, j);
    if (f->mfa == caller) {                /* a body call from frame j */
      pop_to(s, j + 1, lost);
      return push_call(s, mfa, caller);
    }
    if (f->base == caller) {               /* a tail call out of frame j */
      pop_to(s, j + 1, lost);
      if (j == 0 && s->pinned)
        return push_call(s, mfa, caller);
      if (f->mfa == mfa)
        return KS_SC_SAME;
      if (s->leave != NULL)
        s->leave(s->leave_ctx, f->mfa);
      f->mfa = mfa;
      return KS_SC_TAIL;
    }
  }
  return KS_SC_UNKNOWN;
}

int ks_stack_return_mfa(ks_stack *s, uint32_t to, uint64_t *lost) {
  uint32_t j;

  if (s->over > 0) {
    s->over--;
    return KS_SR_OVER;
  }
  if (to == KS_NONE) {
    ks_stack_unwind(s);
    return KS_SR_GONE;
  }
  for (j = s->n - (s->n > 0); j-- > 0;)
    if (ks_stack_at(s, j)->mfa == to) {
      *lost += s->n - j - 2;
      end_above(s, j + 1);
      return KS_SR_TOP;
    }
  if (s->n > 0 && ks_stack_at(s, s->n - 1)->mfa == to)
    return KS_SR_TOP;   /* back in the top frame from a callee we did not see */
  if (s->pinned && ks_stack_at(s, 0)->base == to) {
    if (s->n > 1)
      *lost += s->n - 2;
    end_above(s, 1);   /* out of what the pinned frame tail-called, into it */
    return KS_SR_PINNED;
  }
  if (s->n > 1)
    *lost += s->n - 1;
  ks_stack_unwind(s);
  return KS_SR_GONE;
}

/* ---- flow rules: flame stacks without {caller} ---- */

int ks_stack_call_flow(ks_stack *s, uint32_t mfa, uint32_t fold_depth, uint32_t *from) {
  uint32_t j;

  *from = KS_NONE;
  if (s->over > 0) {
    s->over++;
    return KS_SC_OVER;
  }
  if (s->n == 0)
    return push_call(s, mfa, KS_NONE);
  if (ks_stack_at(s, s->n - 1)->mfa == mfa)
    return KS_SC_SAME;
  /* Deep: a function already on the stack has come round again (a loop of
   * tail calls, or a deep recursion): back to its first frame, every round
   * folded into the first. */
  if (s->n >= fold_depth)
    for (j = 0; j + 1 < s->n; j++)
      if (ks_stack_at(s, j)->mfa == mfa) {
        *from = j;
        end_above(s, j + 1);
        return KS_SC_LOOP;
      }
  return push_call(s, mfa, KS_NONE);
}

int ks_stack_tail_flow(ks_stack *s, uint32_t mfa) {
  ks_sframe *top;

  if (s->over > 0)
    return KS_SC_OVER;   /* the frame past the cap runs mfa now: still one */
  if (s->n == 0)
    return push_call(s, mfa, KS_NONE);
  top = ks_stack_at(s, s->n - 1);
  if (top->mfa == mfa)
    return KS_SC_SAME;
  if (s->leave != NULL)
    s->leave(s->leave_ctx, top->mfa);
  top->mfa = mfa;
  return KS_SC_TAIL;
}

int ks_stack_return_flow(ks_stack *s, uint32_t to, int bottom) {
  ks_sframe *top;
  uint32_t j;

  if (s->over > 0) {
    s->over--;
    return KS_SR_OVER;
  }
  if (to == KS_NONE || s->n == 0) {
    ks_stack_unwind(s);
    return KS_SR_GONE;
  }
  top = ks_stack_at(s, s->n - 1);
  if (top->mfa == to)
    return KS_SR_TOP;
  for (j = s->n - 1; j-- > 0;)
    if (ks_stack_at(s, j)->mfa == to) {
      end_above(s, j + 1);
      return KS_SR_TOP;
    }
  if (s->pinned && ks_stack_at(s, 0)->base == to) {
    end_above(s, 1);
    return KS_SR_PINNED;
  }
  if (!bottom) {
    ks_stack_unwind(s);
    return KS_SR_GONE;
  }
  if (s->n == 1 && s->pinned) {
    /* The trigger's own frame stays: `to', above it, is a frame of its own. */
    return push_call(s, to, KS_NONE) == KS_SC_PUSH ? KS_SR_REPLACED : KS_SR_OVER;
  }
  if (s->leave != NULL)
    s->leave(s->leave_ctx, top->mfa);
  top->mfa = to;
  return KS_SR_REPLACED;
}
