/* names.c: what a frame is called in the outputs, and what a graph's times are.
 *
 *   an MFA          Module:Function/Arity; with the option names => elixir as
 *                   Elixir prints it: Enum.sum/1, :lists.seq/2, Enum."-map/2-fun-0-"/3
 *                   (erlang/src/kprof_names.erl does the same for the text tables);
 *                   a sampled profile's native frame (port/sample/ks_sample.h:
 *                   module [C], [JIT], [unknown], [scheduler], ..., arity 0) as
 *                   its module and function, no space (no escape in folded
 *                   stacks): [C]erts_garbage_collect, [JIT]global::call_bif_shared
 *   a process       name(<0.N.S>) with a registered name, else call(<0.N.S>) with
 *                   what it runs (ks_callpath_proc_call: M:F/A), else <0.N.S>
 *   a group         key(N_processes): processes merged by the option group
 *   pseudo frames   SLEEP (scheduled out), GC (collecting), TRUNCATED (past full
 *                   trace's depth cap), WAITING_TO_RUN (a process's time before it
 *                   was first scheduled in), OVER_BUDGET (call paths past max_bytes),
 *                   TOO_DEEP (frames past a process's stack cap)
 * Names are UTF-8 as the atoms are; each writer escapes what breaks its format
 * (port/write/escape.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_callpath.h"

static const char *const pseudo_names[] = {"SLEEP",          "GC",          "TRUNCATED",
                                           "WAITING_TO_RUN", "OVER_BUDGET", "TOO_DEEP"};

static size_t put(char *buf, size_t cap, int n) {
  if (n < 0)
    return 0;
  return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* A name Elixir writes bare: [a-z_][a-zA-Z0-9_@]*[?!]? (ASCII only; any
 * other byte is quoted, which Elixir would accept too). */
static int identifier(const char *s) {
  size_t i, n = strlen(s);

  if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
    return 0;
  for (i = 1; i < n; i++) {
    char ch = s[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
        ch == '_' || ch == '@')
      continue;
    if ((ch == '?' || ch == '!') && i == n - 1)
      continue;
    return 0;
  }
  return 1;
}

/* s into buf at *o as Elixir writes it: bare, or "quoted" with \" and \\. */
static void put_name(char *buf, size_t cap, size_t *o, const char *s, int quote) {
  size_t i;

  if (quote && *o + 1 < cap)
    buf[(*o)++] = '"';
  for (i = 0; s[i] != 0 && *o + 2 < cap; i++) {
    if (quote && (s[i] == '"' || s[i] == '\\'))
      buf[(*o)++] = '\\';
    buf[(*o)++] = s[i];
  }
  if (quote && *o + 1 < cap)
    buf[(*o)++] = '"';
  buf[*o] = 0;
}

/* Enum.sum/1 for 'Elixir.Enum':sum/1, :lists.seq/2 for lists:seq/2. */
static size_t elixir_mfa(const ks_mfa_view *m, char *buf, size_t cap) {
  size_t o = 0;

  if (strncmp(m->m, "Elixir.", 7) == 0 && m->m[7] != 0) {
    put_name(buf, cap, &o, m->m + 7, 0);
  } else {
    if (o + 1 < cap)
      buf[o++] = ':';
    put_name(buf, cap, &o, m->m, !identifier(m->m));
  }
  if (o + 1 < cap)
    buf[o++] = '.';
  put_name(buf, cap, &o, m->f, !identifier(m->f));
  o += put(buf + o, cap - o, snprintf(buf + o, cap - o, "/%u", m->arity));
  return o;
}

/* "M:F/A" as kprof_flame_srv sends a process's call, Elixir's way; text
 * that is not of that shape is copied as it is. */
static size_t elixir_text(const char *s, char *buf, size_t cap) {
  const char *colon = strchr(s, ':'), *slash = strrchr(s, '/');
  char mod[512], fun[512];
  ks_mfa_view m;
  size_t lm, lf;

  if (colon == NULL || slash == NULL || slash < colon ||
      (lm = (size_t)(colon - s)) >= sizeof(mod) || (lf = (size_t)(slash - colon - 1)) >= sizeof(fun))
    return put(buf, cap, snprintf(buf, cap, "%s", s));
  memcpy(mod, s, lm);
  mod[lm] = 0;
  memcpy(fun, colon + 1, lf);
  fun[lf] = 0;
  m.m = mod;
  m.f = fun;
  m.arity = (uint32_t)strtoul(slash + 1, NULL, 10);
  return elixir_mfa(&m, buf, cap);
}

size_t ks_callpath_frame_name(const ks_callpath *g, const ks_intern *in, uint32_t frame,
                              char *buf, size_t cap) {
  uint32_t v = KS_FR_VAL(frame);
  ks_mfa_view m;
  ks_pid_view pv;
  const ks_fproc *p;

  if (cap == 0)
    return 0;
  buf[0] = 0;
  switch (KS_FR_KIND(frame)) {
  case KS_FR_MFA:
    if (ks_intern_mfa_get(in, v, &m) != KS_OK)
      return put(buf, cap, snprintf(buf, cap, "?"));
    if (m.m[0] == '[' && m.arity == 0 && strchr(m.m, ']') != NULL)   /* a sample's native frame */
      return put(buf, cap, snprintf(buf, cap, "%s%s", m.m, m.f));
    if (g->o.elixir_names)
      return elixir_mfa(&m, buf, cap);
    return put(buf, cap, snprintf(buf, cap, "%s:%s/%u", m.m, m.f, m.arity));
  case KS_FR_PROC: {
    char call[1024];
    if (ks_intern_pid_get(in, v, &pv) != KS_OK)
      return put(buf, cap, snprintf(buf, cap, "<?>"));
    p = ks_callpath_proc(g, v);
    if (p != NULL && p->name != NULL)
      return put(buf, cap, snprintf(buf, cap, "%s(<0.%u.%u>)", p->name, pv.num, pv.serial));
    if (p != NULL && ks_callpath_proc_call(g, in, p, call, sizeof(call)) > 0)
      return put(buf, cap, snprintf(buf, cap, "%s(<0.%u.%u>)", call, pv.num, pv.serial));
    return put(buf, cap, snprintf(buf, cap, "<0.%u.%u>", pv.num, pv.serial));
  }
  case KS_FR_GROUP:
    if (g->groups != NULL && v < g->ngroups)
      return put(buf, cap, snprintf(buf, cap, "%s(%u_processes)", g->groups[v].key,
                                    g->groups[v].n));
    break;
  case KS_FR_PSEUDO:
    if (v < sizeof(pseudo_names) / sizeof(pseudo_names[0]))
      return put(buf, cap, snprintf(buf, cap, "%s", pseudo_names[v]));
    break;
  default:
    break;
  }
  return put(buf, cap, snprintf(buf, cap, "?"));
}

size_t ks_callpath_proc_call(const ks_callpath *g, const ks_intern *in, const ks_fproc *p,
                            char *buf, size_t cap) {
  uint32_t mfa = p->first_mfa != KS_NONE ? p->first_mfa : p->spawn_mfa;
  ks_mfa_view m;

  if (cap == 0)
    return 0;
  buf[0] = 0;
  if (p->call != NULL)
    return g->o.elixir_names ? elixir_text(p->call, buf, cap)
                             : put(buf, cap, snprintf(buf, cap, "%s", p->call));
  if (mfa != KS_NONE && ks_intern_mfa_get(in, mfa, &m) == KS_OK)
    return g->o.elixir_names ? elixir_mfa(&m, buf, cap)
                             : put(buf, cap, snprintf(buf, cap, "%s:%s/%u", m.m, m.f, m.arity));
  return 0;
}

uint64_t ks_callpath_per_event_ns(const ks_callpath *g) {
  return g->k.corrected > 0 ? (g->k.cost_total_ns + g->k.corrected / 2) / g->k.corrected : 0;
}

size_t ks_callpath_correction_text(const ks_callpath *g, char *buf, size_t cap) {
  static const char *const from[] = {"calibration", "capture"};
  const ks_fcounters *k = &g->k;

  if (cap == 0)
    return 0;
  if (g->o.sample_hz > 0)   /* a sampled profile (port/sample/): no tracing in it */
    return put(buf, cap, snprintf(buf, cap, "kprof sampled: hz=%u (each sample one period of "
                                            "a scheduler thread's CPU time; no tracing cost)",
                                  g->o.sample_hz));
  if (g->o.correct_ns == 0 && k->skipped_ns > 0)
    return put(buf, cap, snprintf(buf, cap, "kprof correction: none, skipped_per_event_ns=%llu "
                                            "(raw times: the capture's whole time was less than "
                                            "its events' cost)",
                                  (unsigned long long)k->skipped_ns));
  if (g->o.correct_ns == 0)
    return put(buf, cap, snprintf(buf, cap, "kprof correction: none (raw times: each event's "
                                            "tracing cost is in them)"));
  return put(buf, cap,
             snprintf(buf, cap,
                      "kprof correction: per_event_ns=%llu events=%llu call_ns=%llu "
                      "call_from=%s return_ns=%llu return_from=%s calibration_ns=%u "
                      "subtracted_ms=%.3f clamped=%llu clamped_ms=%.3f (tracing's cost per "
                      "event taken off the time of each call path, by the kind of event, "
                      "measured in the capture's own intervals or by the calibration; "
                      "clamped: paths shorter than their events' cost, counted as zero)",
                      (unsigned long long)ks_callpath_per_event_ns(g),
                      (unsigned long long)k->corrected, (unsigned long long)k->cost_ns[0],
                      from[k->cost_measured[0] != 0], (unsigned long long)k->cost_ns[1],
                      from[k->cost_measured[1] != 0], g->o.correct_ns,
                      (double)k->subtracted_ns / 1e6, (unsigned long long)k->clamped,
                      (double)k->clamped_ns / 1e6));
}
