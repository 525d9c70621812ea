/* ks_stack.h: one process's BEAM call stack, as call and return_to events show it.
 *
 * The one model of a call stack behind the tier walk (tier_walk.c), the full
 * trace's chains (tier_full.c, tiers.c) and the call-path model's stacks
 * (port/callpath/stacks.c).
 *
 * Frames are the BEAM's own: a body call pushes a frame, a tail call replaces
 * the function of the top frame (the frame, and what it returns to, stay).
 * A call's {caller} (from the match spec) is the function the new frame
 * returns to: its `base`. A return_to ends the frames above the one it
 * returns into.
 *
 * Invariants:
 *   - frames [0, n) are the stack, bottom first; frame i is at
 *     (char *)v + i * elem and starts with a ks_sframe; the rest of the
 *     elem bytes are the user's (what a tier, a chain or a flame node needs);
 *   - n <= cap <= max; past max (or when memory runs out) frames are only
 *     counted in `over`: while over > 0 a call adds one, a return_to takes
 *     one and changes nothing else, so the kept frames stay right;
 *   - frames just popped stay readable above n until the next push (a user
 *     reads what a return_to ended there);
 *   - pinned: frame 0 is never replaced by a tail call nor popped by a call
 *     (a flame trigger's frame, kept on the BEAM stack by its return_trace);
 *   - leave (when set) is called for each kept frame that stops running its
 *     function under the search rules: popped (top first), replaced by a
 *     tail call (with the function it ran), or unwound; ks_stack_clear is
 *     silent.
 *
 * Three rule sets, as the tracing that feeds them allows:
 *   - top rules (ks_stack_call_top, ks_stack_return_base): the tiers trace
 *     only some functions, and the VM sends one return_to per chain of tail
 *     calls started by a traced call. A call is a tail call iff its caller is
 *     what the top frame returns to (and not the top frame's own function: a
 *     function calling itself is taken as a body call; either way the frames
 *     belong to that function). A return_to pops the top frame, or, when a
 *     deeper frame returns to the function named, every frame down to it (an
 *     exception unwinding several at once).
 *   - search rules (ks_stack_call_search, ks_stack_return_mfa): a flame
 *     capture traces every function of its processes, so a caller found
 *     deeper in the stack says frames above it were left without a
 *     return_to we could see (counted as lost), and a return_to names the
 *     frame returned into.
 *   - flow rules (ks_stack_call_flow, ks_stack_return_flow): a flame capture
 *     traced without {caller} (the match spec costs the traced process more
 *     than the rest of the event): calls and return_tos alone. The top is
 *     always the function that runs (the last call or return_to), so self
 *     times stay exact; what a call cannot say is whether it was a tail
 *     call. A call is taken as a body call (a tail call shows under the
 *     function that made it, as a call graph has it), except a call of the
 *     top frame's own function (direct recursion, body or tail: one frame),
 *     and, once the stack is deep, a call of a function already on it (a
 *     loop of tail calls come round, as a server's, or a deep recursion:
 *     folded back to its first frame, so no loop grows the stack for ever).
 *     The user may take a call as a tail call it learnt (ks_stack_tail_flow:
 *     port/callpath/tails.c). A return_to pops to the
 *     topmost frame running its function; when no frame runs it (a loop
 *     folded it away), the top frame takes it (bottom known) or the stack
 *     starts again from it (tracing began in the middle of a stack).
 */
#ifndef KS_STACK_H
#define KS_STACK_H

#include "core/ks.h"

typedef struct ks_sframe {
  uint32_t mfa;                 /* the function the frame runs now */
  uint32_t base;                /* what it returns to: the {caller} of the call that opened it */
} ks_sframe;

typedef struct ks_stack {
  void *v;
  uint32_t n, cap;
  uint32_t max;                 /* frames kept at most */
  uint32_t over;                /* frames past max or not allocated: only counted */
  uint32_t elem;                /* bytes per frame: a ks_sframe and the user's fields */
  uint32_t pinned;              /* frame 0 is never replaced nor popped by a call */
  void (*leave)(void *ctx, uint32_t mfa);   /* a frame stops running mfa, or NULL */
  void *leave_ctx;
} ks_stack;

/* What a call did to the stack. */
enum {
  KS_SC_PUSH = 0,               /* a new top frame: the user fills its fields */
  KS_SC_TAIL = 1,               /* the top frame's function was replaced */
  KS_SC_SAME = 2,               /* a tail call to the top frame's own function: no change */
  KS_SC_OVER = 3,               /* past max or out of memory: only counted */
  KS_SC_UNKNOWN = 4,            /* search rules: the caller is not on the stack; nothing done */
  KS_SC_LOOP = 5                /* flow rules: a loop's second round folded into its first:
                                 * back to a frame below that runs the function */
};

/* An empty stack of frames of elem bytes (at least a ks_sframe), at most max kept. */
void ks_stack_init(ks_stack *s, size_t elem, uint32_t max);
void ks_stack_free(ks_stack *s);

static inline ks_sframe *ks_stack_at(const ks_stack *s, uint32_t i) {
  return (ks_sframe *)((char *)s->v + (size_t)i * s->elem);
}

/* The top frame, NULL when there is none. */
static inline ks_sframe *ks_stack_top(const ks_stack *s) {
  return s->n ? ks_stack_at(s, s->n - 1) : NULL;
}

/* No frames, none counted, nothing pinned. */
static inline void ks_stack_clear(ks_stack *s) {
  s->n = 0;
  s->over = 0;
  s->pinned = 0;
}

/* Every kept frame ends (leave, top first), then ks_stack_clear. */
void ks_stack_unwind(ks_stack *s);

/* Pushes a frame: the new top, or NULL when it is only counted (over). */
ks_sframe *ks_stack_push(ks_stack *s, uint32_t mfa, uint32_t base);

/* Top rules: a call (KS_SC_PUSH, KS_SC_TAIL or KS_SC_OVER), and a return_to:
 * how many frames it popped (0: the stack was empty, or an uncounted frame
 * was taken). */
int ks_stack_call_top(ks_stack *s, uint32_t mfa, uint32_t caller);
uint32_t ks_stack_return_base(ks_stack *s, uint32_t to);

/* Search rules: a call whose caller is looked for in the top `depth` frames.
 * Frames above the caller's are popped and added to *lost. KS_SC_UNKNOWN:
 * the caller is on no frame (the user infers it, then pushes the call);
 * caller KS_NONE: the call returns to nothing, it becomes the bottom frame
 * (above a pinned one). */
int ks_stack_call_search(ks_stack *s, uint32_t mfa, uint32_t caller, uint32_t depth,
                         uint64_t *lost);

/* Search rules: return_to `to`. */
enum {
  KS_SR_OVER = 0,               /* an uncounted frame was taken */
  KS_SR_TOP = 1,                /* unwound to the topmost frame below the top running `to`,
                                 * or `to` is the top's own (a callee we did not see) */
  KS_SR_PINNED = 2,             /* out of what a pinned frame tail-called: back to it */
  KS_SR_GONE = 3,               /* `to` is on no frame (or KS_NONE): the stack was cleared,
                                 * the user may infer `to` as the new bottom */
  KS_SR_REPLACED = 4            /* flow rules: no frame ran `to`, the top frame runs it now
                                 * (above a pinned bottom: a new top frame runs it) */
};
int ks_stack_return_mfa(ks_stack *s, uint32_t to, uint64_t *lost);

/* Flow rules: a call known to be a tail call; the top frame runs mfa now
 * (KS_SC_TAIL; KS_SC_OVER past the cap, KS_SC_PUSH on an empty stack). */
int ks_stack_tail_flow(ks_stack *s, uint32_t mfa);
/* Flow rules (above): a call; once the stack is `fold_depth' frames deep, a
 * function already on it folds back to its first frame. KS_SC_PUSH,
 * KS_SC_SAME, KS_SC_LOOP or KS_SC_OVER; with KS_SC_LOOP, *from is the frame
 * it came back to (the frames that ended are still readable above the
 * stack), else KS_NONE. */
int ks_stack_call_flow(ks_stack *s, uint32_t mfa, uint32_t fold_depth, uint32_t *from);
/* Flow rules: return_to `to`; `bottom`: the bottom frame is the process's
 * first (no return goes below it). KS_SR_OVER, KS_SR_TOP, KS_SR_PINNED,
 * KS_SR_REPLACED or KS_SR_GONE. */
int ks_stack_return_flow(ks_stack *s, uint32_t to, int bottom);

#endif
