/* fuzz_decode.c: libFuzzer target for ks_decode_frame on one frame (no framing).
 *
 * Each input is decoded three times:
 *   1. into a ks_intern with small caps (64 MFAs, 64 pids, 16 names), renewed
 *      every 256 inputs (a fresh one per input would spend most of the time
 *      initialising hash tables);
 *   2. again into the same table (the raw-bytes fast path): the result must
 *      be identical, field for field; and, when ks_decode_frame_fast takes the
 *      frame (its pid and MFA are known now), ks_decode_frame_general must give
 *      the same event;
 *   3. into a table kept across inputs with tiny caps (8 / 8 / 4), so the
 *      caps are hit all the time (renewed every 4096 inputs).
 * A crash found with a used table replays alone in nearly every case (only
 * which ids are handed out, and whether a cap is reached, depend on history).
 * After KS_FRAME_TRACE or KS_EFULL the event must be consistent: kind below
 * KS_EV__COUNT, every id KS_NONE or below its table's size and resolvable,
 * flags agreeing with the ids and slices, the seq_trace label and the call
 * payload slices of the frame. After KS_FRAME_COMMAND, Ref and Command must
 * be slices of the frame.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ks_decode.h"

static ks_intern small_in, shared;
static int small_ok, shared_ok;
static unsigned small_runs, shared_runs;

static void fail(const char *what, int rc, const ks_event *ev) {
  fprintf(stderr, "fuzz_decode: %s (rc %d", what, rc);
  if (ev != NULL)
    fprintf(stderr, ", kind %u flags %#x pid %u mfa %u other %u caller %u name %u ts %lld",
            ev->kind, ev->flags, ev->pid, ev->mfa, ev->other, ev->caller, ev->name,
            (long long)ev->ts);
  fprintf(stderr, ")\n");
  abort();
}

static void check_mfa(const ks_intern *in, uint32_t id, int rc, const ks_event *ev) {
  ks_mfa_view v;

  if (id == KS_NONE)
    return;
  if (id >= in->n_mfas || ks_intern_mfa_get(in, id, &v) != KS_OK)
    fail("MFA id out of the table", rc, ev);
  if (v.arity > 255)
    fail("MFA arity above 255", rc, ev);
}

static void check_pid(const ks_intern *in, uint32_t id, int rc, const ks_event *ev) {
  ks_pid_view v;

  if (id == KS_NONE)
    return;
  if (id >= in->n_pids || ks_intern_pid_get(in, id, &v) != KS_OK)
    fail("pid id out of the table", rc, ev);
  if (v.is_port != 0 && v.is_port != 1)
    fail("pid kind neither pid nor port", rc, ev);
}

static int within(const uint8_t *buf, size_t len, ks_slice s) {
  return s.p >= buf && s.n > 0 && s.n <= len && (size_t)(s.p - buf) <= len - s.n;
}

static void check_event(const ks_intern *in, int rc, const ks_decoded *d, const uint8_t *buf,
                        size_t len) {
  const ks_event *ev = &d->ev;

  if (ev->kind >= KS_EV__COUNT)
    fail("kind out of range", rc, ev);
  check_pid(in, ev->pid, rc, ev);
  check_pid(in, ev->other, rc, ev);
  check_mfa(in, ev->mfa, rc, ev);
  check_mfa(in, ev->caller, rc, ev);
  if (ev->name != KS_NONE) {
    ks_slice t;
    if (ev->name >= in->n_terms)
      fail("name id out of the table", rc, ev);
    t = ks_intern_term_get(in, ev->name);
    if (t.p == NULL || t.n == 0)
      fail("name id does not resolve", rc, ev);
    if (ev->kind != KS_EV_REGISTER && ev->kind != KS_EV_UNREGISTER)
      fail("a name on an event other than register/unregister", rc, ev);
  }
  if (!!(ev->flags & KS_EVF_LABEL) != (d->label.p != NULL))
    fail("KS_EVF_LABEL disagrees with the label slice", rc, ev);
  if (d->label.p != NULL && !within(buf, len, d->label))
    fail("the label is not a slice of the frame", rc, ev);
  if (d->payload.p != NULL && !within(buf, len, d->payload))
    fail("the payload is not a slice of the frame", rc, ev);
  if (!!(ev->flags & KS_EVF_CALLER) != (ev->caller != KS_NONE))
    fail("KS_EVF_CALLER disagrees with caller", rc, ev);
  if ((ev->flags & KS_EVF_WALL) && !(ev->flags & KS_EVF_TS))
    fail("KS_EVF_WALL without KS_EVF_TS", rc, ev);
  if (!(ev->flags & KS_EVF_TS) && ev->ts != 0)
    fail("ts set without KS_EVF_TS", rc, ev);
  if (rc == KS_FRAME_TRACE && ev->pid == KS_NONE && ev->kind != KS_EV_SEQ_TRACE)
    fail("a trace event without its pid", rc, ev);
  if (ev->kind == KS_EV_SEQ_TRACE && ev->pid != KS_NONE)
    fail("seq_trace with a pid", rc, ev);
}

static int check(ks_intern *in, const uint8_t *data, size_t size, ks_decoded *d) {
  int rc = ks_decode_frame(in, data, size, d);

  switch (rc) {
  case KS_FRAME_TRACE:
  case KS_EFULL:
    check_event(in, rc, d, data, size);
    break;
  case KS_FRAME_COMMAND:
    if (!within(data, size, d->ref))
      fail("command Ref is not a slice of the frame", rc, NULL);
    if (d->cmd.p != NULL && !within(data, size, d->cmd))
      fail("command is not a slice of the frame", rc, NULL);
    break;
  case KS_EUNKNOWN:
  case KS_EBADTERM:
    break;
  default:
    fail("unexpected return code", rc, NULL);
  }
  if (in->n_mfas > in->max_mfas || in->n_pids > in->max_pids || in->n_terms > in->max_terms)
    fail("an intern table grew past its cap", rc, NULL);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ks_intern_limits small = {64, 64, 16}, tiny = {8, 8, 4};
  ks_decoded d1, d2, d3;
  int rc1, rc2;

  /* 1 and 2: a table with room, twice. */
  if (small_ok && ++small_runs % 256 == 0) {
    ks_intern_free(&small_in);
    small_ok = 0;
  }
  if (!small_ok && !(small_ok = ks_intern_init(&small_in, &small) == KS_OK))
    return 0;
  rc1 = check(&small_in, data, size, &d1);
  rc2 = check(&small_in, data, size, &d2);
  if (rc1 != rc2)
    fail("a second decode into the same table returned another code", rc2, &d2.ev);
  if ((rc1 == KS_FRAME_TRACE || rc1 == KS_EFULL) &&
      (memcmp(&d1.ev, &d2.ev, sizeof(d1.ev)) != 0 || d1.label.p != d2.label.p ||
       d1.label.n != d2.label.n || d1.payload.p != d2.payload.p || d1.payload.n != d2.payload.n))
    fail("a second decode into the same table gave another event", rc2, &d2.ev);
  if (rc1 == KS_FRAME_COMMAND &&
      (d1.ref.p != d2.ref.p || d1.ref.n != d2.ref.n || d1.cmd.p != d2.cmd.p ||
       d1.cmd.n != d2.cmd.n))
    fail("a second decode sliced the command differently", rc2, NULL);

  /* 2b: where the fast path answers, the general decoder gives the same event. */
  if (ks_decode_frame_fast(&small_in, data, size, &d3) != 0) {
    ks_decoded g;
    if (ks_decode_frame_general(&small_in, data, size, &g) != KS_FRAME_TRACE ||
        memcmp(&g.ev, &d3.ev, sizeof(g.ev)) != 0 || g.label.p != NULL || g.payload.p != NULL ||
        d3.label.p != NULL || d3.payload.p != NULL)
      fail("the fast path and the general decoder disagree", KS_FRAME_TRACE, &d3.ev);
  }

  /* 3: a long-lived table at its caps. */
  if (shared_ok && ++shared_runs % 4096 == 0) {
    ks_intern_free(&shared);
    shared_ok = 0;
  }
  if (!shared_ok)
    shared_ok = ks_intern_init(&shared, &tiny) == KS_OK;
  if (shared_ok) {
    int rc3 = check(&shared, data, size, &d3);
    /* Same shape of answer as with room to spare, except that a trace may become a drop. */
    if (rc3 != rc1 && !(rc3 == KS_EFULL && (rc1 == KS_FRAME_TRACE || rc1 == KS_EFULL)) &&
        !(rc1 == KS_EFULL && rc3 == KS_FRAME_TRACE))
      fail("a table at its caps changed the kind of answer", rc3, &d3.ev);
    if ((rc3 == KS_FRAME_TRACE || rc3 == KS_EFULL) && (rc1 == KS_FRAME_TRACE || rc1 == KS_EFULL) &&
        d3.ev.kind != d1.ev.kind)
      fail("a table at its caps changed the event kind", rc3, &d3.ev);
  }
  return 0;
}
