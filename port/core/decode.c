/* decode.c: trace messages (every shape OTP 25+ sends a port tracer) into ks_event records.
 *
 * {trace | trace_ts, PidOrPort, What, Args..., [Timestamp]},
 * {seq_trace, Label, Info[, Timestamp]} and the owner's {kprof, Ref, Command}.
 * Values, arguments, messages and exit reasons are skipped, never copied.
 */
#include "ks_decode.h"

const char *const ks_event_kind_names[KS_EV__COUNT] = {
#define KS_X_NAME(e, s) s,
  KS_EVENT_KINDS(KS_X_NAME)
#undef KS_X_NAME
};

int ks_event_kind_of(const ks_atom *a) {
  int k;

  /* The bulk of the traffic first, by length. */
  switch (a->n) {
  case 2: if (a->s[0] == 'i' && a->s[1] == 'n') return KS_EV_IN; break;
  case 3: if (memcmp(a->s, "out", 3) == 0) return KS_EV_OUT; break;
  case 4: if (memcmp(a->s, "call", 4) == 0) return KS_EV_CALL; break;
  case 9: if (memcmp(a->s, "return_to", 9) == 0) return KS_EV_RETURN_TO; break;
  case 11: if (memcmp(a->s, "return_from", 11) == 0) return KS_EV_RETURN_FROM; break;
  default: break;
  }
  for (k = 0; k < KS_EV__COUNT; k++)
    if (a->n == strlen(ks_event_kind_names[k]) && memcmp(a->s, ks_event_kind_names[k], a->n) == 0)
      return k;
  return -1;
}

/* Well formed but not ours, or broken: decides what a failed frame counts as. */
static int classify(const unsigned char *buf, size_t len) {
  ks_etf c;

  ks_etf_init(&c, buf, len);
  if (ks_etf_version(&c) != KS_OK || ks_etf_skip(&c) != KS_OK || !ks_etf_at_end(&c))
    return KS_EBADTERM;
  return KS_EUNKNOWN;
}

/* Interning that hits a cap leaves KS_NONE and marks the frame as a drop. */
static int note(int rc, uint32_t *id, int *full) {
  if (rc == KS_EFULL) {
    *id = KS_NONE;
    *full = 1;
    return KS_OK;
  }
  return rc;
}

static inline __attribute__((always_inline)) int decode_pid(ks_etf *c, ks_intern *in, uint32_t *id, int *is_port, int *full) {
  size_t n = in->last_pid_len;
  ks_slice raw;

  /* Bytes equal to the last pid's are that pid: no need to parse them. */
  if (n > 0 && KS_NEED(c, n) && ks_key_eq(c->p + c->i, in->last_pid, n)) {
    c->i += n;
    *id = in->last_pid_id;
    *is_port = in->last_pid[0] != KS_TAG_NEW_PID && in->last_pid[0] != KS_TAG_PID;
    return KS_OK;
  }
  if (ks_etf_pid(c, &raw, is_port) != KS_OK)
    return KS_EBADTERM;
  return note(ks_intern_pid(in, raw, id), id, full);
}

/* {M, F, Arity | Args} */
static int decode_mfa(ks_etf *c, ks_intern *in, uint32_t *id, int *full) {
  size_t at = c->i;
  uint32_t ar, arity;
  ks_atom m, f;
  ks_slice raw;

  if (ks_etf_tuple(c, &ar) != KS_OK || ar != 3 || ks_etf_atom(c, &m) != KS_OK ||
      ks_etf_atom(c, &f) != KS_OK || !KS_NEED(c, 2))
    return KS_EBADTERM;
  if (c->p[c->i] == KS_TAG_SMALL_INTEGER) {
    /* The common case: the tuple's own bytes are the key, nothing is copied. */
    arity = c->p[c->i + 1];
    c->i += 2;
    raw.p = c->p + at;
    raw.n = c->i - at;
    return note(ks_intern_mfa_raw(in, raw, &m, &f, arity, id), id, full);
  }
  if (ks_etf_list_length(c, &arity) != KS_OK)
    return KS_EBADTERM;
  return note(ks_intern_mfa(in, &m, &f, arity, id), id, full);
}

/* An MFA where the VM may also send something else (0, undefined, a port command). */
static int decode_mfa_or_skip(ks_etf *c, ks_intern *in, uint32_t *id, int *full) {
  size_t at = c->i;

  *id = KS_NONE;
  if (decode_mfa(c, in, id, full) == KS_OK)
    return KS_OK;
  c->i = at;
  *id = KS_NONE;
  return ks_etf_skip(c);
}

/* Skips one term, giving its bytes. */
static int term_slice(ks_etf *c, ks_slice *s) {
  size_t at = c->i;

  if (ks_etf_skip(c) != KS_OK)
    return KS_EBADTERM;
  s->p = c->p + at;
  s->n = c->i - at;
  return KS_OK;
}

static int decode_label(ks_etf *c, ks_decoded *d) {
  if (term_slice(c, &d->label) != KS_OK)
    return KS_EBADTERM;
  d->ev.flags |= KS_EVF_LABEL;
  return KS_OK;
}

static int decode_name(ks_etf *c, ks_intern *in, ks_event *ev, int *full) {
  ks_slice raw;

  if (term_slice(c, &raw) != KS_OK)
    return KS_EBADTERM;
  return note(ks_intern_term(in, raw, &ev->name), &ev->name, full);
}

/* [] or {Flags, Label, Serial, From, LastCnt}; anything else is left unread. */
static int decode_token(ks_etf *c, ks_decoded *d) {
  size_t at = c->i;
  uint32_t ar;

  if (ks_etf_peek(c) == KS_TAG_NIL) {
    c->i++;
    d->ev.flags |= KS_EVF_TOKEN;
    return KS_OK;
  }
  if (ks_etf_tuple(c, &ar) != KS_OK || ar != 5) {
    c->i = at;
    return KS_EUNKNOWN;
  }
  d->ev.flags |= KS_EVF_TOKEN;
  if (ks_etf_skip(c) != KS_OK || decode_label(c, d) != KS_OK ||
      ks_etf_skip(c) != KS_OK || ks_etf_skip(c) != KS_OK || ks_etf_skip(c) != KS_OK)
    return KS_EBADTERM;
  return KS_OK;
}

static int decode_caller(ks_etf *c, ks_intern *in, ks_event *ev, int *full) {
  size_t at = c->i;

  if (decode_mfa(c, in, &ev->caller, full) == KS_OK) {
    if (ev->caller != KS_NONE)
      ev->flags |= KS_EVF_CALLER;
    return KS_OK;
  }
  c->i = at;
  ev->caller = KS_NONE;
  return KS_EUNKNOWN;
}

/*
 * The match-spec extra of a call: a token, a caller MFA, {Token, Caller} or
 * {Token, Caller, Payload} (kprof's request markers). Anything else is skipped.
 */
static int decode_extra(ks_etf *c, ks_intern *in, ks_decoded *d, int *full) {
  size_t at = c->i;
  uint32_t ar;
  int rc;

  if ((rc = decode_token(c, d)) != KS_EUNKNOWN)
    return rc;
  if (decode_caller(c, in, &d->ev, full) == KS_OK)
    return KS_OK;
  if (ks_etf_tuple(c, &ar) == KS_OK && (ar == 2 || ar == 3) &&
      (rc = decode_token(c, d)) != KS_EUNKNOWN) {
    if (rc != KS_OK)
      return rc;
    if (decode_caller(c, in, &d->ev, full) != KS_OK && ks_etf_skip(c) != KS_OK)
      return KS_EBADTERM;
    if (ar == 3 && term_slice(c, &d->payload) != KS_OK)
      return KS_EBADTERM;
    return KS_OK;
  }
  c->i = at;
  d->ev.flags &= (uint8_t)~(KS_EVF_TOKEN | KS_EVF_LABEL | KS_EVF_CALLER);
  d->ev.caller = KS_NONE;
  d->label.p = d->payload.p = NULL;
  d->label.n = d->payload.n = 0;
  return ks_etf_skip(c);
}

/* Integer ns, {MonoNs, Unique} or {Mega, Sec, Micro}. */
static int decode_ts(ks_etf *c, ks_event *ev) {
  int64_t mega, sec, micro;
  uint32_t ar;

  if (ks_etf_peek(c) != KS_TAG_SMALL_TUPLE) {
    if (ks_etf_int64(c, &ev->ts) != KS_OK)
      return KS_EBADTERM;
  } else {
    if (ks_etf_tuple(c, &ar) != KS_OK)
      return KS_EBADTERM;
    if (ar == 2) {
      if (ks_etf_int64(c, &ev->ts) != KS_OK || ks_etf_skip(c) != KS_OK)
        return KS_EBADTERM;
    } else if (ar == 3) {
      if (ks_etf_int64(c, &mega) != KS_OK || ks_etf_int64(c, &sec) != KS_OK ||
          ks_etf_int64(c, &micro) != KS_OK || mega < 0 || mega > 9000 || sec < 0 ||
          sec >= 1000000 || micro < 0 || micro >= 1000000)
        return KS_EBADTERM;
      ev->ts = (mega * 1000000 + sec) * 1000000000 + micro * 1000;
      ev->flags |= KS_EVF_WALL;
    } else {
      return KS_EBADTERM;
    }
  }
  ev->flags |= KS_EVF_TS;
  return KS_OK;
}

/* The elements after What: `rest` of them, shaped by the kind. */
static int decode_args(ks_etf *c, ks_intern *in, ks_decoded *d, uint32_t rest, int *full) {
  ks_event *ev = &d->ev;
  int is_port;

  switch (ev->kind) {
  case KS_EV_CALL:
    if (rest != 1 && rest != 2)
      return KS_EBADTERM;
    if (decode_mfa(c, in, &ev->mfa, full) != KS_OK)
      return KS_EBADTERM;
    return rest == 2 ? decode_extra(c, in, d, full) : KS_OK;
  case KS_EV_RETURN_FROM:
  case KS_EV_EXCEPTION_FROM:
    if (rest != 2 || decode_mfa(c, in, &ev->mfa, full) != KS_OK)
      return KS_EBADTERM;
    return ks_etf_skip(c);
  case KS_EV_RETURN_TO:
  case KS_EV_IN: case KS_EV_OUT:
  case KS_EV_IN_EXITING: case KS_EV_OUT_EXITING: case KS_EV_OUT_EXITED:
    if (rest != 1)
      return KS_EBADTERM;
    return decode_mfa_or_skip(c, in, &ev->mfa, full);
  case KS_EV_SPAWN:
  case KS_EV_SPAWNED:
    if (rest != 2 || decode_pid(c, in, &ev->other, &is_port, full) != KS_OK)
      return KS_EBADTERM;
    return decode_mfa_or_skip(c, in, &ev->mfa, full);
  case KS_EV_LINK: case KS_EV_UNLINK:
  case KS_EV_GETTING_LINKED: case KS_EV_GETTING_UNLINKED:
    if (rest != 1)
      return KS_EBADTERM;
    return decode_pid(c, in, &ev->other, &is_port, full);
  case KS_EV_OPEN:
    /* {trace, Port, open, Pid, Driver} */
    if (rest != 2 || decode_pid(c, in, &ev->other, &is_port, full) != KS_OK)
      return KS_EBADTERM;
    return ks_etf_skip(c);
  case KS_EV_REGISTER: case KS_EV_UNREGISTER:
    if (rest != 1)
      return KS_EBADTERM;
    return decode_name(c, in, ev, full);
  case KS_EV_SEND: case KS_EV_SEND_TO_NON_EXISTING_PROCESS: {
    int t;
    if (rest != 2 || ks_etf_skip(c) != KS_OK)
      return KS_EBADTERM;
    t = ks_etf_peek(c);
    if (t == KS_TAG_NEW_PID || t == KS_TAG_PID || t == KS_TAG_NEW_PORT ||
        t == KS_TAG_PORT || t == KS_TAG_V4_PORT)
      return decode_pid(c, in, &ev->other, &is_port, full);
    return ks_etf_skip(c);   /* a registered name or {Name, Node} */
  }
  default:
    /* exit, receive, closed, gc_*: one term we do not keep. */
    if (rest != 1)
      return KS_EBADTERM;
    return ks_etf_skip(c);
  }
}

static int decode_trace(ks_etf *c, ks_intern *in, uint32_t arity, int has_ts, ks_decoded *d,
                        int *full) {
  ks_event *ev = &d->ev;
  ks_atom what;
  int kind, is_port;

  if (arity < 4u + (unsigned)has_ts)
    return KS_EBADTERM;
  if (decode_pid(c, in, &ev->pid, &is_port, full) != KS_OK)
    return KS_EBADTERM;
  if (is_port)
    ev->flags |= KS_EVF_PORT;
  if (ks_etf_atom(c, &what) != KS_OK || (kind = ks_event_kind_of(&what)) < 0 ||
      kind == KS_EV_SEQ_TRACE)
    return KS_EBADTERM;
  ev->kind = (uint8_t)kind;
  if (decode_args(c, in, d, arity - 3 - (uint32_t)has_ts, full) != KS_OK)
    return KS_EBADTERM;
  if (has_ts && decode_ts(c, ev) != KS_OK)
    return KS_EBADTERM;
  return KS_OK;
}

/* {seq_trace, Label, Info} and {seq_trace, Label, Info, Timestamp} */
static int decode_seq_trace(ks_etf *c, uint32_t arity, ks_decoded *d) {
  if (arity != 3 && arity != 4)
    return KS_EBADTERM;
  d->ev.kind = KS_EV_SEQ_TRACE;
  if (decode_label(c, d) != KS_OK || ks_etf_skip(c) != KS_OK)
    return KS_EBADTERM;
  if (arity == 4 && decode_ts(c, &d->ev) != KS_OK)
    return KS_EBADTERM;
  return KS_OK;
}

/* {kprof, Ref, Command}; other arities still give Ref so the owner hears of it. */
static int decode_command(ks_etf *c, uint32_t arity, ks_decoded *out) {
  size_t at = c->i;

  if (arity < 2 || ks_etf_skip(c) != KS_OK)
    return KS_EBADTERM;
  out->ref.p = c->p + at;
  out->ref.n = c->i - at;
  if (arity != 3) {
    for (; arity > 2; arity--)
      if (ks_etf_skip(c) != KS_OK)
        return KS_EBADTERM;
    return KS_OK;
  }
  at = c->i;
  if (ks_etf_skip(c) != KS_OK)
    return KS_EBADTERM;
  out->cmd.p = c->p + at;
  out->cmd.n = c->i - at;
  return KS_OK;
}

int ks_decode_frame_general(ks_intern *in, const unsigned char *buf, size_t len,
                            ks_decoded *out) {
  ks_etf c;
  ks_atom tag;
  uint32_t arity;
  int full = 0, rc;

  ks_decoded_clear(out);
  ks_etf_init(&c, buf, len);
  if (ks_etf_version(&c) != KS_OK || ks_etf_tuple(&c, &arity) != KS_OK || arity < 1 ||
      ks_etf_atom(&c, &tag) != KS_OK)
    return classify(buf, len);
  if (ks_etf_atom_is(&tag, "trace_ts"))
    rc = decode_trace(&c, in, arity, 1, out, &full);
  else if (ks_etf_atom_is(&tag, "trace"))
    rc = decode_trace(&c, in, arity, 0, out, &full);
  else if (ks_etf_atom_is(&tag, "seq_trace"))
    rc = decode_seq_trace(&c, arity, out);
  else if (ks_etf_atom_is(&tag, "kprof")) {
    /* A command that is not a whole term, or has trailing bytes, is garbage. */
    if (decode_command(&c, arity, out) != KS_OK || !ks_etf_at_end(&c))
      return KS_EBADTERM;
    return KS_FRAME_COMMAND;
  } else
    return classify(buf, len);
  if (rc != KS_OK || !ks_etf_at_end(&c))
    return classify(buf, len);
  return full ? KS_EFULL : KS_FRAME_TRACE;
}

/*
 * The fast path. Nearly all the traffic is {trace_ts, Pid, What, MFA[, Value], Ts}
 * from a process and an MFA the tables already hold, with an 8-digit
 * monotonic timestamp. For those the decoder above parses the MFA's atoms,
 * hashes its bytes into two tables and compares the kind atom against every
 * kind; here the tag is matched against the bytes the VM writes, and the
 * MFA's bytes are looked up as they stand through a direct-mapped cache (they
 * were checked when they were first seen). Anything else, and any miss, goes
 * to the decoder above, so the answers are the same (test_replay and
 * fuzz_decode compare the two).
 */

/* 'trace_ts' as ATOM_EXT (OTP 25) and as SMALL_ATOM_UTF8_EXT (OTP 26+), after {131, 104, Arity}. */
static const unsigned char tag_latin1[11] = {KS_TAG_ATOM, 0, 8, 't', 'r', 'a', 'c', 'e', '_', 't', 's'};
static const unsigned char tag_utf8[10] = {KS_TAG_SMALL_ATOM_UTF8, 8, 't', 'r', 'a', 'c', 'e', '_', 't', 's'};

#define FAST_TS_LEN 11   /* SMALL_BIG_EXT, 8 digits, the sign, the tag */

/* n (8 to 16) bytes equal to a literal's: two overlapping loads, no call to memcmp. */
static inline int eq8_16(const unsigned char *s, const char *lit, size_t n) {
  return ks_load64(s) == ks_load64((const unsigned char *)lit) &&
         ks_load64(s + n - 8) == ks_load64((const unsigned char *)lit + n - 8);
}

/* The kinds the fast path takes, from the atom's text. */
static inline int fast_kind(const unsigned char *s, size_t n) {
  switch (n) {
  case 2: return s[0] == 'i' && s[1] == 'n' ? KS_EV_IN : -1;
  case 3: return s[0] == 'o' && s[1] == 'u' && s[2] == 't' ? KS_EV_OUT : -1;
  case 4: return s[0] == 'c' && s[1] == 'a' && s[2] == 'l' && s[3] == 'l' ? KS_EV_CALL : -1;
  case 9: return eq8_16(s, "return_to", 9) ? KS_EV_RETURN_TO : -1;
  case 11: return eq8_16(s, "return_from", 11) ? KS_EV_RETURN_FROM : -1;
  case 14: return eq8_16(s, "exception_from", 14) ? KS_EV_EXCEPTION_FROM : -1;
  default: return -1;
  }
}

int ks_decode_frame_fast(ks_intern *in, const unsigned char *buf, size_t len, ks_decoded *out) {
  const unsigned char *ts;
  size_t at;
  uint64_t mag;
  uint32_t arity, ar;
  ks_atom what, m, f;
  ks_etf c;
  int kind, is_port, full = 0;

  if (len < 3 + sizeof(tag_latin1) + FAST_TS_LEN || buf[0] != KS_TAG_VERSION ||
      buf[1] != KS_TAG_SMALL_TUPLE || (buf[2] != 5 && buf[2] != 6))
    return 0;
  arity = buf[2];
  /* The timestamp closes the frame: a negative or positive 8-digit bignum. The
   * cursor stops where it starts. */
  ts = buf + len - FAST_TS_LEN;
  if (ts[0] != KS_TAG_SMALL_BIG || ts[1] != 8 || ts[2] > 1)
    return 0;
  mag = ks_load64(ts + 3);
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  return 0;
#endif
  if (mag > (uint64_t)INT64_MAX)
    return 0;
  ks_etf_init(&c, buf, len - FAST_TS_LEN);
  if (eq8_16(buf + 3, (const char *)tag_latin1, sizeof(tag_latin1)))
    c.i = 3 + sizeof(tag_latin1);
  else if (eq8_16(buf + 3, (const char *)tag_utf8, sizeof(tag_utf8)))
    c.i = 3 + sizeof(tag_utf8);
  else
    return 0;
  ks_decoded_clear(out);
  /* A pid the decoder above would find or intern alike; a port, or a table at its cap, is its. */
  if (decode_pid(&c, in, &out->ev.pid, &is_port, &full) != KS_OK || is_port || full)
    return 0;
  if (ks_etf_atom(&c, &what) != KS_OK || (kind = fast_kind(what.s, what.n)) < 0)
    return 0;
  at = c.i;
  if (kind == KS_EV_RETURN_FROM || kind == KS_EV_EXCEPTION_FROM) {
    /* {M, F, Arity} and a value that has to end where the timestamp starts. */
    if (arity != 6 || ks_etf_tuple(&c, &ar) != KS_OK || ar != 3 || ks_etf_atom(&c, &m) != KS_OK ||
        ks_etf_atom(&c, &f) != KS_OK || !KS_NEED(&c, 2) || c.p[c.i] != KS_TAG_SMALL_INTEGER)
      return 0;
    c.i += 2;
    if (ks_intern_mfa_known(in, buf + at, c.i - at, &out->ev.mfa) != KS_OK ||
        ks_etf_skip(&c) != KS_OK || !ks_etf_at_end(&c))
      return 0;
  } else {
    /* call without a match-spec extra, return_to, in, out: the MFA fills the rest. */
    if (arity != 5 || ks_intern_mfa_known(in, buf + at, c.n - at, &out->ev.mfa) != KS_OK)
      return 0;
  }
  out->ev.kind = (uint8_t)kind;
  out->ev.flags = KS_EVF_TS;
  out->ev.ts = ts[2] ? -(int64_t)mag : (int64_t)mag;
  return KS_FRAME_TRACE;
}

int ks_decode_frame(ks_intern *in, const unsigned char *buf, size_t len, ks_decoded *out) {
  int rc = ks_decode_frame_fast(in, buf, len, out);

  return rc != 0 ? rc : ks_decode_frame_general(in, buf, len, out);
}
