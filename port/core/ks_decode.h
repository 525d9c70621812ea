/* ks_decode.h: one frame in, one event record (or a command) out. */
#ifndef KS_DECODE_H
#define KS_DECODE_H

#include "ks_event.h"
#include "ks_intern.h"

enum {
  KS_FRAME_TRACE = 1,     /* out->ev holds the event */
  KS_FRAME_COMMAND = 2    /* out->ref / out->cmd hold {kprof, Ref, Cmd} */
};

/* Slices are raw ETF (no version byte) inside the frame: valid until the next frame. */
typedef struct ks_decoded {
  ks_event ev;
  ks_slice label;     /* the seq_trace label (ev.flags & KS_EVF_LABEL) */
  ks_slice payload;   /* third element of a {Token, Caller, Payload} call extra */
  ks_slice ref;       /* {kprof, Ref, Command}: Ref */
  ks_slice cmd;       /* Command; p == NULL for a badly shaped command */
} ks_decoded;

/* No event, no ids, no slices. Field by field: a memset of the whole record
 * costs more than the decode of a call. */
static inline void ks_decoded_clear(ks_decoded *out) {
  out->ev.kind = 0;
  out->ev.flags = 0;
  out->ev.reserved = 0;
  out->ev.ts = 0;
  out->ev.pid = out->ev.mfa = out->ev.other = out->ev.caller = out->ev.name = KS_NONE;
  out->label.p = out->payload.p = out->ref.p = out->cmd.p = NULL;
  out->label.n = out->payload.n = out->ref.n = out->cmd.n = 0;
}

/*
 * Returns KS_FRAME_TRACE or KS_FRAME_COMMAND; KS_EFULL when a trace message
 * was decoded but an intern table is at its cap (a drop: ev.kind is set);
 * KS_EUNKNOWN for a well-formed term that is neither; KS_EBADTERM otherwise.
 * Allocates only when it meets an MFA, pid or label for the first time.
 */
int ks_decode_frame(ks_intern *in, const unsigned char *buf, size_t len, ks_decoded *out);
/*
 * ks_decode_frame is these two: the fast path takes {trace_ts, Pid, What, MFA[, Value], Ts}
 * of a known MFA (nearly all traffic) and returns KS_FRAME_TRACE, or 0 for a
 * frame it leaves to the general decoder, which takes everything. Where the fast
 * path answers, both answer the same (test_replay and fuzz_decode compare them).
 */
int ks_decode_frame_fast(ks_intern *in, const unsigned char *buf, size_t len, ks_decoded *out);
int ks_decode_frame_general(ks_intern *in, const unsigned char *buf, size_t len,
                            ks_decoded *out);

/* The kind whose atom this is, or -1. */
int ks_event_kind_of(const ks_atom *a);

#endif
