/* test_stack.c: the call-stack model (include/ks_stack.h) on its own: the three
 * rule sets, the counted frames past the cap, growth, what a return_to ends,
 * the leave hook. */
#include <stdlib.h>

#include "test_util.h"

/* A user frame: the model's and a field of the user's. */
typedef struct uframe {
  ks_sframe f;
  uint32_t tag;
} uframe;

enum { A = 1, B, C, D, E, F };

static ks_stack s;

static void setup(void) {
  ks_stack_init(&s, sizeof(uframe), 64);
}

static void teardown(void) {
  ks_stack_free(&s);
}

static uint32_t mfa_at(uint32_t i) {
  return ks_stack_at(&s, i)->mfa;
}

/* Top rules: a body call pushes; the user's fields of a new frame are its own. */
START_TEST(top_body_call_pushes) {
  ck_assert_ptr_null(ks_stack_top(&s));
  ck_assert_int_eq(ks_stack_call_top(&s, A, KS_NONE), KS_SC_PUSH);
  ((uframe *)ks_stack_top(&s))->tag = 7;
  ck_assert_int_eq(ks_stack_call_top(&s, B, A), KS_SC_PUSH);
  ((uframe *)ks_stack_top(&s))->tag = 8;
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(0), A);
  ck_assert_uint_eq(ks_stack_at(&s, 1)->base, A);
  ck_assert_uint_eq(((uframe *)ks_stack_at(&s, 0))->tag, 7);
  ck_assert_uint_eq(((uframe *)ks_stack_at(&s, 1))->tag, 8);
}
END_TEST

/* Top rules: a call whose caller is what the top returns to replaces the top's
 * function; a function calling itself is a body call. */
START_TEST(top_tail_call_replaces) {
  ks_stack_call_top(&s, A, KS_NONE);
  ks_stack_call_top(&s, B, A);
  ck_assert_int_eq(ks_stack_call_top(&s, C, A), KS_SC_TAIL);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(1), C);
  ck_assert_uint_eq(ks_stack_at(&s, 1)->base, A);
  ck_assert_int_eq(ks_stack_call_top(&s, C, C), KS_SC_PUSH);   /* C calling itself */
  ck_assert_uint_eq(s.n, 3);
  /* One return_to ends the frame, whatever ran in it. */
  ck_assert_uint_eq(ks_stack_return_base(&s, C), 1);
  ck_assert_uint_eq(ks_stack_return_base(&s, A), 1);
  ck_assert_uint_eq(s.n, 1);
}
END_TEST

/* Top rules: a return_to to what a deeper frame returns to ends every frame
 * down to it (an exception); the ended frames stay readable above n. */
START_TEST(top_return_to_deeper_frame) {
  ks_stack_call_top(&s, A, KS_NONE);
  ks_stack_call_top(&s, B, A);
  ks_stack_call_top(&s, C, B);
  ks_stack_call_top(&s, D, C);
  ck_assert_uint_eq(ks_stack_return_base(&s, A), 3);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(mfa_at(1), B);
  ck_assert_uint_eq(mfa_at(3), D);
}
END_TEST

/* Top rules: returning to a function no frame returns to ends the top frame
 * only; on an empty stack it ends nothing. */
START_TEST(top_return_to_frame_not_on_stack) {
  ks_stack_call_top(&s, A, KS_NONE);
  ks_stack_call_top(&s, B, A);
  ck_assert_uint_eq(ks_stack_return_base(&s, F), 1);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(ks_stack_return_base(&s, KS_NONE), 1);
  ck_assert_uint_eq(ks_stack_return_base(&s, A), 0);
  ck_assert_uint_eq(s.n, 0);
}
END_TEST

/* Past max frames are only counted: calls add, return_tos take, and the kept
 * frames are as they were once the counted ones are gone. */
START_TEST(frames_past_max_are_counted) {
  uint32_t k;

  ks_stack_free(&s);
  ks_stack_init(&s, sizeof(uframe), 3);
  for (k = 0; k < 3; k++)
    ck_assert_int_eq(ks_stack_call_top(&s, A + k, k ? A + k - 1 : KS_NONE), KS_SC_PUSH);
  ck_assert_int_eq(ks_stack_call_top(&s, E, C), KS_SC_OVER);
  ck_assert_int_eq(ks_stack_call_top(&s, F, E), KS_SC_OVER);   /* a tail call too */
  ck_assert_uint_eq(s.n, 3);
  ck_assert_uint_eq(s.over, 2);
  ck_assert_uint_eq(ks_stack_return_base(&s, E), 0);
  ck_assert_uint_eq(ks_stack_return_base(&s, C), 0);
  ck_assert_uint_eq(s.over, 0);
  ck_assert_uint_eq(ks_stack_return_base(&s, B), 1);
  ck_assert_uint_eq(s.n, 2);
  ks_stack_clear(&s);
  ck_assert_uint_eq(s.n + s.over, 0);
}
END_TEST

/* Growth past the first allocation keeps every frame and its user fields. */
START_TEST(growth_keeps_frames) {
  uint32_t k;

  ks_stack_free(&s);
  ks_stack_init(&s, sizeof(uframe), 1000);
  for (k = 0; k < 1000; k++) {
    ck_assert_int_eq(ks_stack_call_top(&s, 100 + k, k ? 99 + k : KS_NONE), KS_SC_PUSH);
    ((uframe *)ks_stack_top(&s))->tag = k;
  }
  ck_assert_uint_eq(s.n, 1000);
  ck_assert_uint_eq(s.cap, 1000);   /* doubling stops at max */
  for (k = 0; k < 1000; k++) {
    ck_assert_uint_eq(mfa_at(k), 100 + k);
    ck_assert_uint_eq(((uframe *)ks_stack_at(&s, k))->tag, k);
  }
  ck_assert_ptr_null(ks_stack_push(&s, 1, 2));
  ck_assert_uint_eq(s.over, 1);
}
END_TEST

/* Search rules: a body call from a frame below the top pops the frames above
 * it (lost), a tail call out of a frame replaces it, an unknown caller is left
 * to the user. */
START_TEST(search_calls) {
  uint64_t lost = 0;

  ck_assert_int_eq(ks_stack_call_search(&s, A, KS_NONE, 256, &lost), KS_SC_PUSH);
  ck_assert_int_eq(ks_stack_call_search(&s, B, A, 256, &lost), KS_SC_PUSH);
  ks_stack_push(&s, C, F);   /* C and D were called in frames we did not see */
  ks_stack_push(&s, D, C);
  ck_assert_int_eq(ks_stack_call_search(&s, E, B, 256, &lost), KS_SC_PUSH);   /* from B */
  ck_assert_uint_eq(s.n, 3);
  ck_assert_uint_eq(lost, 2);   /* C and D */
  ck_assert_uint_eq(mfa_at(2), E);
  ck_assert_int_eq(ks_stack_call_search(&s, D, B, 256, &lost), KS_SC_TAIL);   /* E tail-calls */
  ck_assert_uint_eq(mfa_at(2), D);
  ck_assert_uint_eq(ks_stack_at(&s, 2)->base, B);
  ck_assert_int_eq(ks_stack_call_search(&s, D, B, 256, &lost), KS_SC_SAME);
  ck_assert_int_eq(ks_stack_call_search(&s, C, F, 256, &lost), KS_SC_UNKNOWN);
  ck_assert_int_eq(ks_stack_call_search(&s, C, A, 1, &lost), KS_SC_UNKNOWN);   /* too deep */
  ck_assert_uint_eq(s.n, 3);
  ck_assert_uint_eq(lost, 2);
  /* A call that returns to nothing starts the stack again. */
  ck_assert_int_eq(ks_stack_call_search(&s, F, KS_NONE, 256, &lost), KS_SC_PUSH);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(mfa_at(0), F);
}
END_TEST

/* Search rules: return_to names the frame returned into; frames above the one
 * below the top are lost; a function on no frame clears the stack. */
START_TEST(search_returns) {
  uint64_t lost = 0;

  ks_stack_call_search(&s, A, KS_NONE, 256, &lost);
  ks_stack_call_search(&s, B, A, 256, &lost);
  ks_stack_call_search(&s, C, B, 256, &lost);
  ks_stack_call_search(&s, D, C, 256, &lost);
  ck_assert_int_eq(ks_stack_return_mfa(&s, B, &lost), KS_SR_TOP);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(lost, 1);   /* D ended without its return_to */
  ck_assert_int_eq(ks_stack_return_mfa(&s, B, &lost), KS_SR_TOP);   /* a callee not seen */
  ck_assert_uint_eq(s.n, 2);
  ck_assert_int_eq(ks_stack_return_mfa(&s, F, &lost), KS_SR_GONE);
  ck_assert_uint_eq(s.n, 0);
  ck_assert_uint_eq(lost, 2);
}
END_TEST

/* Search rules: a pinned bottom frame is never replaced nor popped by a call,
 * and a return_to its base comes back to it. */
START_TEST(search_pinned_bottom) {
  uint64_t lost = 0;

  ks_stack_push(&s, A, F);
  s.pinned = 1;
  ck_assert_int_eq(ks_stack_call_search(&s, B, F, 256, &lost), KS_SC_PUSH);   /* A tail-calls B */
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(0), A);
  ck_assert_int_eq(ks_stack_call_search(&s, C, KS_NONE, 256, &lost), KS_SC_PUSH);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(1), C);
  ks_stack_call_search(&s, D, C, 256, &lost);
  ck_assert_int_eq(ks_stack_return_mfa(&s, F, &lost), KS_SR_PINNED);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(s.pinned, 1);
}
END_TEST

/* The leave hook's calls, in order. */
static uint32_t left[64];
static int nleft;

static void leave(void *ctx, uint32_t mfa) {
  (void)ctx;
  left[nleft++] = mfa;
}

/* Flow rules: every call a frame but direct recursion; a return_to pops to
 * the topmost frame of its function; each frame that ends is left. */
START_TEST(flow_calls_and_returns) {
  uint32_t from;

  s.leave = leave;
  nleft = 0;
  ck_assert_int_eq(ks_stack_call_flow(&s, A, 128, &from), KS_SC_PUSH);
  ck_assert_int_eq(ks_stack_call_flow(&s, B, 128, &from), KS_SC_PUSH);
  ck_assert_int_eq(ks_stack_call_flow(&s, B, 128, &from), KS_SC_SAME);   /* recursion */
  ck_assert_int_eq(ks_stack_call_flow(&s, C, 128, &from), KS_SC_PUSH);   /* maybe a tail call */
  ck_assert_int_eq(ks_stack_call_flow(&s, A, 128, &from), KS_SC_PUSH);   /* not deep: a frame */
  ck_assert_uint_eq(from, KS_NONE);
  ck_assert_uint_eq(s.n, 4);
  ck_assert_int_eq(ks_stack_return_flow(&s, C, 1), KS_SR_TOP);
  ck_assert_uint_eq(s.n, 3);
  ck_assert_int_eq(nleft, 1);
  ck_assert_uint_eq(left[0], A);
  ck_assert_uint_eq(mfa_at(3), A);   /* what ended is still readable above the stack */
  ck_assert_int_eq(ks_stack_return_flow(&s, A, 1), KS_SR_TOP);   /* C and B: one chain */
  ck_assert_uint_eq(s.n, 1);
  ck_assert_int_eq(nleft, 3);
  ck_assert_uint_eq(left[1], C);
  ck_assert_uint_eq(left[2], B);
  ck_assert_int_eq(ks_stack_return_flow(&s, A, 1), KS_SR_TOP);   /* a callee not seen */
  ck_assert_uint_eq(s.n, 1);
  /* A known tail call: the top frame runs it now. */
  ck_assert_int_eq(ks_stack_tail_flow(&s, D), KS_SC_TAIL);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(mfa_at(0), D);
  ck_assert_uint_eq(left[3], A);
  ck_assert_int_eq(ks_stack_tail_flow(&s, D), KS_SC_SAME);
  ck_assert_int_eq(ks_stack_return_flow(&s, KS_NONE, 1), KS_SR_GONE);
  ck_assert_uint_eq(s.n, 0);
  ck_assert_int_eq(nleft, 5);
}
END_TEST

/* Flow rules, once the stack is fold_depth deep: a function already on it
 * goes back to its first frame (a loop's rounds folded into the first). */
START_TEST(flow_deep_loops_fold) {
  uint32_t from;
  int k;

  ck_assert_int_eq(ks_stack_call_flow(&s, A, 4, &from), KS_SC_PUSH);
  for (k = 0; k < 3; k++) {   /* B, C, D, B, C, D, ...: a loop of tail calls */
    ks_stack_call_flow(&s, B, 4, &from);
    ks_stack_call_flow(&s, C, 4, &from);
    ks_stack_call_flow(&s, D, 4, &from);
  }
  ck_assert_uint_le(s.n, 5);
  ck_assert_int_eq(ks_stack_call_flow(&s, B, 4, &from), KS_SC_LOOP);
  ck_assert_uint_eq(from, 1);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(1), B);
  ck_assert_int_eq(ks_stack_call_flow(&s, E, 4, &from), KS_SC_PUSH);   /* new: a frame */
}
END_TEST

/* Flow rules: a return_to a function on no frame: the top frame takes it when
 * the bottom is the process's first; else the stack starts again (the user
 * infers `to'); out of a pinned frame's callee, back to it. */
START_TEST(flow_return_not_on_stack) {
  uint32_t from;

  ks_stack_call_flow(&s, A, 128, &from);
  ks_stack_call_flow(&s, B, 128, &from);
  ck_assert_int_eq(ks_stack_return_flow(&s, C, 1), KS_SR_REPLACED);
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(1), C);
  ck_assert_int_eq(ks_stack_return_flow(&s, E, 0), KS_SR_GONE);
  ck_assert_uint_eq(s.n, 0);
  ks_stack_push(&s, A, F);
  s.pinned = 1;
  ks_stack_call_flow(&s, B, 128, &from);
  ck_assert_int_eq(ks_stack_return_flow(&s, F, 1), KS_SR_PINNED);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_int_eq(ks_stack_return_flow(&s, D, 1), KS_SR_REPLACED);   /* above the pin */
  ck_assert_uint_eq(s.n, 2);
  ck_assert_uint_eq(mfa_at(0), A);
  ck_assert_uint_eq(mfa_at(1), D);
}
END_TEST

Suite *stack_suite(void) {
  Suite *su = suite_create("stack");
  TCase *tc = tcase_create("stack");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, top_body_call_pushes);
  tcase_add_test(tc, top_tail_call_replaces);
  tcase_add_test(tc, top_return_to_deeper_frame);
  tcase_add_test(tc, top_return_to_frame_not_on_stack);
  tcase_add_test(tc, frames_past_max_are_counted);
  tcase_add_test(tc, growth_keeps_frames);
  tcase_add_test(tc, search_calls);
  tcase_add_test(tc, search_returns);
  tcase_add_test(tc, search_pinned_bottom);
  tcase_add_test(tc, flow_calls_and_returns);
  tcase_add_test(tc, flow_deep_loops_fold);
  tcase_add_test(tc, flow_return_not_on_stack);
  suite_add_tcase(su, tc);
  return su;
}
