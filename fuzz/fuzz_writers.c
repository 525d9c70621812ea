/* fuzz_writers.c: libFuzzer target for the flame writers, through the sink's commands.
 *
 * The input is a small script, not an external term: the harness turns it into
 * the frames kprof_sink reads (flame_start, flame_pids, trace events, flame_write),
 * so that the fuzzer spends its time on what the writers see, not on the decoder
 * (fuzz_decode's). Hostile text goes where the sink takes text from outside:
 * process names and initial calls (binaries of any bytes, up to 64 KiB: quotes,
 * `;`, newlines, `<`, `&`, invalid UTF-8) and the atoms of module and function
 * names (any bytes, up to 255 * 4). Every capture is written in all five formats
 * into a directory of the harness's own (mkdtemp), through flame_write as
 * kprof_flame asks for it, then each file is checked:
 *   folded      only lines "frames count": no space or control byte in the frames,
 *               UTF-8;
 *   perf        no control byte but tab and newline, UTF-8;
 *   speedscope  JSON (a full parse) in valid UTF-8;
 *   svg         well-formed XML as far as names can break it (tags balanced,
 *               attributes quoted, every `&` an entity, no control byte) in valid
 *               UTF-8;
 *   callgrind   (callgrind.out.cap) UTF-8 lines a callgrind reader takes: header
 *               lines, then fl=/fn=/cfi=/cfn= with an id named at its first use and
 *               only then, calls=N 0, cost lines `0 N', totals: the sum of the self
 *               cost lines; no control byte;
 *   meta        (cap.meta.json, beside the folded file) JSON in valid UTF-8.
 * flame_start must answer ok (an option the sink no longer takes would leave
 * every input without a capture). Any other reply to flame_write than
 * {ok, Paths, Info} or {error, no_events | enomem, _} aborts.
 *
 * Script: 4 header bytes, then operations until the input ends.
 *   h[0] bits 0-1 group (pid, name, initial_call, all); bit 2 fold_recursion;
 *        bit 3 names => elixir; bit 4 sleep; bit 5 gc; bit 6 children; bit 7 top => 5
 *   h[1] max_stack (0: 256): frames past it go to TOO_DEEP
 *   h[2] perf_period_us / 10 (0: automatic)
 *   h[3] bits 0-2 max_bytes = 64 KiB << n (OVER_BUDGET past it); bits 3-7
 *        correct_ns = 100 * n (tracing's cost taken off, clamping)
 *   op % 8: 0 names: pid, text name, text call ({flame_pids, ...});
 *           1 call: pid, mfa, caller mfa or none;  2 return_to: pid, mfa;
 *           3 in: pid, mfa;  4 out: pid, mfa;  5 gc start or end: pid;
 *           6 spawn: pid, child pid, mfa;  7 register: pid, atom
 *   pid: one byte (16 processes); mfa: atom, atom, arity byte; atom: length byte, bytes;
 *   text: length byte L, L bytes; L = 255: a count byte C and a chunk (length byte,
 *   bytes) repeated to 256 * C + 255 bytes at most (64 KiB names).
 * Each event is 1 to 256 us after the one before (the op byte's high bits).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ei.h>

#include "sink/ks_sink.h"

static char dir[64];
static int64_t ts;

typedef struct script {
  const uint8_t *p;
  size_t n;
} script;

/* The last reply the sink emitted (the harness feeds one command at a time). */
static unsigned char *reply;
static size_t reply_len;

static void keep_reply(void *ctx, const unsigned char *frame, size_t len) {
  (void)ctx;
  free(reply);
  reply = malloc(len);
  if (reply == NULL)
    abort();
  memcpy(reply, frame, len);
  reply_len = len;
}

static int byte(script *s) {
  if (s->n == 0)
    return -1;
  s->n--;
  return *s->p++;
}

static size_t take(script *s, size_t want, const uint8_t **at) {
  size_t k = want < s->n ? want : s->n;

  *at = s->p;
  s->p += k;
  s->n -= k;
  return k;
}

static void feed(ks_sink *sink, ei_x_buff *x) {
  unsigned char len[4];

  ks_put_be32(len, (uint32_t)x->index);
  ks_sink_feed(sink, len, 4);
  ks_sink_feed(sink, (const unsigned char *)x->buff, (size_t)x->index);
  ei_x_free(x);
}

static void put_pid(ei_x_buff *x, int num) {
  erlang_pid p;

  memset(&p, 0, sizeof(p));
  strcpy(p.node, "n@h");
  p.num = (unsigned)num;
  p.creation = 1;
  ei_x_encode_pid(x, &p);
}

static void begin_event(ei_x_buff *x, int pid, const char *tag, int arity) {
  ei_x_new_with_version(x);
  ei_x_encode_tuple_header(x, arity);
  ei_x_encode_atom(x, "trace_ts");
  put_pid(x, pid);
  ei_x_encode_atom(x, tag);
}

static void end_event(ks_sink *sink, ei_x_buff *x, int op) {
  ts += 1000 * (1 + (op >> 3));
  ei_x_encode_longlong(x, ts);
  feed(sink, x);
}

/* An atom of the script's bytes, as they are (SMALL_ATOM_UTF8_EXT or ATOM_UTF8_EXT). */
static void put_atom(ei_x_buff *x, script *s) {
  const uint8_t *at;
  int len = byte(s);
  size_t n;
  unsigned char head[3];

  if (len < 0)
    len = 0;
  /* Up to 255 * 4 bytes: a length byte of 255 reads a second one to add. */
  n = take(s, (size_t)len, &at);
  if (len == 255) {
    int more = byte(s);
    const uint8_t *at2;
    size_t n2 = take(s, more < 0 ? 0 : (size_t)more * 3, &at2);
    head[0] = 118;
    head[1] = (unsigned char)((n + n2) >> 8);
    head[2] = (unsigned char)(n + n2);
    ei_x_append_buf(x, (const char *)head, 3);
    ei_x_append_buf(x, (const char *)at, (int)n);
    ei_x_append_buf(x, (const char *)at2, (int)n2);
    return;
  }
  head[0] = 119;
  head[1] = (unsigned char)n;
  ei_x_append_buf(x, (const char *)head, 2);
  ei_x_append_buf(x, (const char *)at, (int)n);
}

static void put_mfa(ei_x_buff *x, script *s) {
  int a;

  ei_x_encode_tuple_header(x, 3);
  put_atom(x, s);
  put_atom(x, s);
  a = byte(s);
  ei_x_encode_long(x, a < 0 ? 0 : a);
}

/* A binary of the script's text, or `undefined' for none. */
static void put_text(ei_x_buff *x, script *s) {
  static uint8_t big[65536];
  const uint8_t *at;
  int len = byte(s), count, chunk;
  size_t n, k;

  if (len < 0) {
    ei_x_encode_atom(x, "undefined");
    return;
  }
  if (len < 255) {
    n = take(s, (size_t)len, &at);
    ei_x_encode_binary(x, at, (long)n);
    return;
  }
  count = byte(s);
  chunk = byte(s);
  n = take(s, chunk < 0 ? 0 : (size_t)chunk, &at);
  k = 0;
  if (n > 0)
    while (k + n <= sizeof(big) && k < 256 * (size_t)(count < 0 ? 0 : count) + 255) {
      memcpy(big + k, at, n);
      k += n;
    }
  ei_x_encode_binary(x, big, (long)k);
}

static void command_begin(ei_x_buff *x, const char *name, int arity) {
  static long ref;

  ei_x_new_with_version(x);
  ei_x_encode_tuple_header(x, 3);
  ei_x_encode_atom(x, "kprof");
  ei_x_encode_long(x, ++ref);
  ei_x_encode_tuple_header(x, arity);
  ei_x_encode_atom(x, name);
}

static void opt_atom(ei_x_buff *x, const char *key, const char *v) {
  ei_x_encode_tuple_header(x, 2);
  ei_x_encode_atom(x, key);
  ei_x_encode_atom(x, v);
}

static void opt_long(ei_x_buff *x, const char *key, long v) {
  ei_x_encode_tuple_header(x, 2);
  ei_x_encode_atom(x, key);
  ei_x_encode_long(x, v);
}

/* The last reply is {kprof_reply, Ref, ok}. */
static int reply_is_ok(void) {
  const char *p = (const char *)reply + 4;
  char tag[MAXATOMLEN_UTF8];
  int idx = 0, ver, ar;

  return reply != NULL && reply_len > 4 && ei_decode_version(p, &idx, &ver) == 0 &&
         ei_decode_tuple_header(p, &idx, &ar) == 0 && ar == 3 &&
         ei_decode_atom(p, &idx, tag) == 0 && ei_skip_term(p, &idx) == 0 &&
         ei_decode_atom(p, &idx, tag) == 0 && strcmp(tag, "ok") == 0;
}

static void start(ks_sink *sink, const uint8_t *h) {
  static const char *groups[] = {"pid", "name", "initial_call", "all"};
  ei_x_buff x;

  command_begin(&x, "flame_start", 3);
  ei_x_encode_long(&x, 1);
  ei_x_encode_list_header(&x, 12);
  opt_atom(&x, "group", groups[h[0] & 3]);
  opt_atom(&x, "fold_recursion", (h[0] & 4) ? "true" : "false");
  opt_atom(&x, "names", (h[0] & 8) ? "elixir" : "erlang");
  opt_atom(&x, "sleep", (h[0] & 16) ? "true" : "false");
  opt_atom(&x, "gc", (h[0] & 32) ? "true" : "false");
  opt_atom(&x, "children", (h[0] & 64) ? "true" : "false");
  opt_long(&x, "top", (h[0] & 128) ? 5 : 0);
  opt_long(&x, "max_stack", h[1] ? h[1] : 256);
  opt_long(&x, "max_bytes", 65536L << (h[3] & 7));
  opt_long(&x, "correct_ns", 100L * (h[3] >> 3));
  opt_long(&x, "perf_period_us", (long)h[2] * 10);
  opt_long(&x, "max_procs", 64);
  ei_x_encode_empty_list(&x);
  feed(sink, &x);
  if (!reply_is_ok()) {
    fprintf(stderr, "fuzz_writers: flame_start was refused\n");
    abort();
  }
}

static void op(ks_sink *sink, script *s, int code) {
  static const char *gc[2] = {"gc_minor_start", "gc_minor_end"};
  static int gc_on[17];
  int pid = byte(s);
  ei_x_buff x;

  pid = pid < 0 ? 1 : pid % 16 + 1;
  switch (code & 7) {
  case 0:
    command_begin(&x, "flame_pids", 3);
    ei_x_encode_long(&x, 1);
    ei_x_encode_list_header(&x, 1);
    ei_x_encode_tuple_header(&x, 3);
    put_pid(&x, pid);
    put_text(&x, s);
    put_text(&x, s);
    ei_x_encode_empty_list(&x);
    feed(sink, &x);
    return;
  case 1:
    begin_event(&x, pid, "call", 6);
    put_mfa(&x, s);
    if (byte(s) & 1)
      put_mfa(&x, s);
    else
      ei_x_encode_atom(&x, "undefined");
    break;
  case 2: case 3: case 4:
    begin_event(&x, pid, (code & 7) == 2 ? "return_to" : (code & 7) == 3 ? "in" : "out", 5);
    put_mfa(&x, s);
    break;
  case 5:
    begin_event(&x, pid, gc[gc_on[pid]], 5);
    gc_on[pid] ^= 1;
    ei_x_encode_empty_list(&x);
    break;
  case 6: {
    int child = byte(s);
    begin_event(&x, pid, "spawn", 6);
    put_pid(&x, child < 0 ? 17 : child % 16 + 1);
    ei_x_encode_tuple_header(&x, 3);
    put_atom(&x, s);
    put_atom(&x, s);
    ei_x_encode_empty_list(&x);
    break;
  }
  default:
    begin_event(&x, pid, "register", 5);
    put_atom(&x, s);
    break;
  }
  end_event(sink, &x, code);
}

/* ---- the checks of the files ---- */

static void bad(const char *file, const char *what, const unsigned char *b, size_t n, size_t at) {
  size_t i, from = at > 40 ? at - 40 : 0;

  fprintf(stderr, "fuzz_writers: %s: %s at byte %zu of %zu:\n  ", file, what, at, n);
  for (i = from; i < n && i < at + 40; i++)
    fprintf(stderr, i == at ? "[%02x]" : "%02x ", b[i]);
  fprintf(stderr, "\n");
  abort();
}

/* Length of the UTF-8 sequence at b (RFC 3629: no overlong forms, no surrogates), 0 if bad. */
static size_t utf8_at(const unsigned char *b, size_t n) {
  unsigned c = b[0];
  size_t len, k;
  uint32_t cp;

  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    len = 4, cp = c & 0x07;
  else
    return 0;
  if (n < len)
    return 0;
  for (k = 1; k < len; k++) {
    if ((b[k] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (b[k] & 0x3f);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

static void check_utf8(const char *file, const unsigned char *b, size_t n) {
  size_t i = 0, k;

  while (i < n) {
    if ((k = utf8_at(b + i, n - i)) == 0)
      bad(file, "not UTF-8", b, n, i);
    i += k;
  }
}

static void check_folded(const unsigned char *b, size_t n) {
  size_t i = 0, start, space;

  check_utf8("folded", b, n);
  /* Only "frames count" lines: no comment, no header (flamegraph.pl and
   * difffolded.pl take any other line for a bad one). */
  while (i < n) {
    start = i;
    space = SIZE_MAX;
    while (i < n && b[i] != '\n') {
      if (b[i] < 0x20 || b[i] == 0x7f)
        bad("folded", "a control byte", b, n, i);
      if (b[i] == ' ') {
        if (space != SIZE_MAX)
          bad("folded", "a space inside the frames", b, n, space);
        space = i;
      }
      i++;
    }
    if (i == n)
      bad("folded", "a line without its newline", b, n, start);
    if (space == SIZE_MAX || space == start || space + 1 == i)
      bad("folded", "no \"frames count\"", b, n, start);
    for (space++; space < i; space++)
      if (b[space] < '0' || b[space] > '9')
        bad("folded", "a count that is not digits", b, n, space);
    i++;
  }
}

static void check_perf(const unsigned char *b, size_t n) {
  size_t i;

  check_utf8("perf", b, n);
  for (i = 0; i < n; i++)
    if ((b[i] < 0x20 && b[i] != '\t' && b[i] != '\n') || b[i] == 0x7f)
      bad("perf", "a control byte", b, n, i);
}

/* JSON (RFC 8259), the whole text one value. */
typedef struct json {
  const unsigned char *b;
  size_t n, i;
  int depth;
} json;

static void jfail(json *j, const char *what) {
  bad("speedscope", what, j->b, j->n, j->i);
}

static void jspace(json *j) {
  while (j->i < j->n && (j->b[j->i] == ' ' || j->b[j->i] == '\n' || j->b[j->i] == '\t' ||
                         j->b[j->i] == '\r'))
    j->i++;
}

static void jvalue(json *j);

static void jstring(json *j) {
  static const char hex[] = "0123456789abcdefABCDEF";
  int k;

  j->i++;
  while (j->i < j->n && j->b[j->i] != '"') {
    if (j->b[j->i] < 0x20)
      jfail(j, "a control byte in a string");
    if (j->b[j->i] == '\\') {
      j->i++;
      if (j->i >= j->n)
        jfail(j, "an escape at the end");
      if (j->b[j->i] == 'u') {
        for (k = 1; k <= 4; k++)
          if (j->i + (size_t)k >= j->n || strchr(hex, j->b[j->i + (size_t)k]) == NULL ||
              j->b[j->i + (size_t)k] == 0)
            jfail(j, "a bad \\u escape");
        j->i += 4;
      } else if (strchr("\"\\/bfnrt", j->b[j->i]) == NULL || j->b[j->i] == 0) {
        jfail(j, "a bad escape");
      }
    }
    j->i++;
  }
  if (j->i >= j->n)
    jfail(j, "an unterminated string");
  j->i++;
}

static void jnumber(json *j) {
  if (j->i < j->n && j->b[j->i] == '-')
    j->i++;
  if (j->i >= j->n || j->b[j->i] < '0' || j->b[j->i] > '9')
    jfail(j, "a bad number");
  while (j->i < j->n && ((j->b[j->i] >= '0' && j->b[j->i] <= '9') || j->b[j->i] == '.' ||
                         j->b[j->i] == 'e' || j->b[j->i] == 'E' || j->b[j->i] == '+' ||
                         j->b[j->i] == '-'))
    j->i++;
}

static void jlist(json *j, char close, int object) {
  if (++j->depth > 64)
    jfail(j, "nested too deep");
  j->i++;
  jspace(j);
  if (j->i < j->n && j->b[j->i] == (unsigned char)close) {
    j->i++;
    j->depth--;
    return;
  }
  for (;;) {
    jspace(j);
    if (object) {
      if (j->i >= j->n || j->b[j->i] != '"')
        jfail(j, "a key that is not a string");
      jstring(j);
      jspace(j);
      if (j->i >= j->n || j->b[j->i] != ':')
        jfail(j, "no colon after a key");
      j->i++;
    }
    jvalue(j);
    jspace(j);
    if (j->i < j->n && j->b[j->i] == ',') {
      j->i++;
      continue;
    }
    if (j->i < j->n && j->b[j->i] == (unsigned char)close) {
      j->i++;
      j->depth--;
      return;
    }
    jfail(j, "no comma or close");
  }
}

static void jvalue(json *j) {
  jspace(j);
  if (j->i >= j->n)
    jfail(j, "a value missing");
  switch (j->b[j->i]) {
  case '{': jlist(j, '}', 1); return;
  case '[': jlist(j, ']', 0); return;
  case '"': jstring(j); return;
  case 't': if (j->n - j->i >= 4 && memcmp(j->b + j->i, "true", 4) == 0) { j->i += 4; return; } break;
  case 'f': if (j->n - j->i >= 5 && memcmp(j->b + j->i, "false", 5) == 0) { j->i += 5; return; } break;
  case 'n': if (j->n - j->i >= 4 && memcmp(j->b + j->i, "null", 4) == 0) { j->i += 4; return; } break;
  default: jnumber(j); return;
  }
  jfail(j, "a bad literal");
}

static void check_json(const unsigned char *b, size_t n) {
  json j = {b, n, 0, 0};

  check_utf8("speedscope", b, n);
  jvalue(&j);
  jspace(&j);
  if (j.i != n)
    jfail(&j, "text after the value");
}

/* XML well-formedness as far as a name can break it. */
static size_t skip_to(const unsigned char *b, size_t n, size_t i, const char *end) {
  size_t k = strlen(end);

  while (i + k <= n && memcmp(b + i, end, k) != 0)
    i++;
  if (i + k > n)
    bad("svg", "an unterminated section", b, n, i);
  return i + k;
}

static size_t check_entity(const unsigned char *b, size_t n, size_t i) {
  static const char *named[] = {"amp;", "lt;", "gt;", "quot;", "apos;"};
  size_t k, s = i + 1;

  for (k = 0; k < 5; k++)
    if (n - s >= strlen(named[k]) && memcmp(b + s, named[k], strlen(named[k])) == 0)
      return s + strlen(named[k]);
  if (s < n && b[s] == '#') {
    s++;
    if (s < n && b[s] == 'x')
      s++;
    k = s;
    while (s < n && ((b[s] >= '0' && b[s] <= '9') || (b[s] >= 'a' && b[s] <= 'f') ||
                     (b[s] >= 'A' && b[s] <= 'F')))
      s++;
    if (s > k && s < n && b[s] == ';')
      return s + 1;
  }
  bad("svg", "an & that is no entity", b, n, i);
  return n;
}

static int name_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == ':' || c == '-' || c == '.';
}

static void check_svg(const unsigned char *b, size_t n) {
  char stack[64][32];
  int depth = 0, closing;
  size_t i = 0, s, len;

  check_utf8("svg", b, n);
  while (i < n) {
    unsigned char c = b[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      bad("svg", "a control byte", b, n, i);
    if (c == '&') {
      i = check_entity(b, n, i);
      continue;
    }
    if (c != '<') {
      i++;
      continue;
    }
    if (n - i >= 9 && memcmp(b + i, "<![CDATA[", 9) == 0) {
      i = skip_to(b, n, i + 9, "]]>");
      continue;
    }
    if (n - i >= 4 && memcmp(b + i, "<!--", 4) == 0) {
      i = skip_to(b, n, i + 4, "-->");
      continue;
    }
    if (n - i >= 2 && (b[i + 1] == '?' || b[i + 1] == '!')) {
      i = skip_to(b, n, i + 2, ">");
      continue;
    }
    i++;
    closing = i < n && b[i] == '/';
    i += (size_t)closing;
    s = i;
    while (i < n && name_char(b[i]))
      i++;
    len = i - s;
    if (len == 0 || len >= sizeof(stack[0]))
      bad("svg", "a bad tag name", b, n, s);
    if (closing) {
      if (depth == 0 || strlen(stack[depth - 1]) != len || memcmp(stack[depth - 1], b + s, len) != 0)
        bad("svg", "a close tag that opens nothing", b, n, s);
      depth--;
      if (i >= n || b[i] != '>')
        bad("svg", "a close tag not closed", b, n, i);
      i++;
      continue;
    }
    if (depth == 64)
      bad("svg", "nested too deep", b, n, s);
    memcpy(stack[depth], b + s, len);
    stack[depth][len] = 0;
    depth++;
    for (;;) {
      while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t'))
        i++;
      if (i < n && b[i] == '>') {
        i++;
        break;
      }
      if (n - i >= 2 && b[i] == '/' && b[i + 1] == '>') {
        i += 2;
        depth--;
        break;
      }
      s = i;
      while (i < n && name_char(b[i]))
        i++;
      if (i == s || i >= n || b[i] != '=' || i + 1 >= n || (b[i + 1] != '"' && b[i + 1] != '\''))
        bad("svg", "a bad attribute", b, n, s);
      {
        unsigned char q = b[i + 1];
        i += 2;
        while (i < n && b[i] != q) {
          if (b[i] == '<')
            bad("svg", "a < in an attribute", b, n, i);
          if ((b[i] < 0x20 && b[i] != '\t' && b[i] != '\n') || b[i] == 0x7f)
            bad("svg", "a control byte in an attribute", b, n, i);
          i = b[i] == '&' ? check_entity(b, n, i) : i + 1;
        }
        if (i >= n)
          bad("svg", "an attribute not closed", b, n, s);
        i++;
      }
    }
  }
  if (depth != 0)
    bad("svg", "tags left open", b, n, n);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b;
  long len;

  if (f == NULL)
    return NULL;
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = malloc((size_t)len + 1);
  if (b == NULL || fread(b, 1, (size_t)len, f) != (size_t)len)
    abort();
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* callgrind: the lines a reader parses, names compressed consistently, totals right. */
static void check_callgrind(const unsigned char *b, size_t n) {
  static uint8_t named[4][4096];   /* fl, fn (cfi, cfn share them): id seen with a name */
  size_t i = 0, start, k;
  unsigned long long self = 0, totals = 0, v;
  int body = 0, after_calls = 0, have_totals = 0;
  char line[64];

  memset(named, 0, sizeof(named));
  check_utf8("callgrind", b, n);
  if (n < 19 || memcmp(b, "# callgrind format\n", 19) != 0)
    bad("callgrind", "no `# callgrind format' first", b, n, 0);
  while (i < n) {
    start = i;
    while (i < n && b[i] != '\n') {
      if (b[i] < 0x20 || b[i] == 0x7f)
        bad("callgrind", "a control byte", b, n, i);
      i++;
    }
    if (i == n)
      bad("callgrind", "a last line without its newline", b, n, start);
    k = i - start;
    i++;
    snprintf(line, sizeof(line), "%.*s", (int)(k < 63 ? k : 63), (const char *)b + start);
    if (k == 0 || b[start] == '#')
      continue;
    if (!body) {
      if (strcmp(line, "events: us") == 0)
        body = 1;
      else if (strchr(line, ':') == NULL)
        bad("callgrind", "a header line that is no `key: value'", b, n, start);
      continue;
    }
    if (have_totals)
      bad("callgrind", "a line after totals:", b, n, start);
    if (strncmp(line, "fl=(", 4) == 0 || strncmp(line, "fn=(", 4) == 0 ||
        strncmp(line, "cfi=(", 5) == 0 || strncmp(line, "cfn=(", 5) == 0) {
      const unsigned char *p = memchr(b + start, '(', k), *end = b + start + k;
      unsigned long id = 0;
      int file = line[0] == 'f' ? line[1] == 'l' : line[2] == 'i';
      for (p++; p < end && *p >= '0' && *p <= '9'; p++)
        id = id * 10 + (unsigned long)(*p - '0');
      if (p == end || *p != ')')
        bad("callgrind", "a bad compressed id", b, n, start);
      p++;
      if (id >= 4096)   /* past the table: not followed */
        continue;
      if (p == end) {
        if (!named[file][id])
          bad("callgrind", "an id used before it is named", b, n, start);
      } else {
        if (*p != ' ' || p + 1 == end || p[1] == '(')
          bad("callgrind", "a bad name after an id", b, n, start);
        if (named[file][id])
          bad("callgrind", "an id named twice", b, n, start);
        named[file][id] = 1;
      }
      if (after_calls)
        bad("callgrind", "no cost line after calls=", b, n, start);
    } else if (sscanf(line, "calls=%llu 0", &v) == 1) {
      after_calls = 1;
    } else if (sscanf(line, "totals: %llu", &totals) == 1) {
      have_totals = 1;
    } else if (line[0] == '0' && line[1] == ' ' && sscanf(line + 2, "%llu", &v) == 1) {
      if (!after_calls)
        self += v;
      after_calls = 0;
    } else {
      bad("callgrind", "a line no reader takes", b, n, start);
    }
  }
  if (!have_totals || totals != self)
    bad("callgrind", "totals: is not the sum of the self costs", b, n, n);
}

static void check_files(void) {
  static const struct {
    const char *ext;
    void (*check)(const unsigned char *, size_t);
  } files[] = {{"cap.folded", check_folded}, {"cap.perf", check_perf},
               {"cap.speedscope.json", check_json}, {"cap.svg", check_svg},
               {"callgrind.out.cap", check_callgrind}, {"cap.meta.json", check_json}};
  char path[128];
  unsigned char *b;
  size_t k, n;

  for (k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[k].ext);
    if ((b = slurp(path, &n)) == NULL) {
      fprintf(stderr, "fuzz_writers: %s was not written\n", path);
      abort();
    }
    files[k].check(b, n);
    free(b);
    unlink(path);
  }
}

static void cleanup(void) {
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof(dir), "/tmp/kprof-fuzz-writers-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("fuzz_writers: mkdtemp");
    abort();
  }
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *formats[] = {"folded", "perf", "speedscope", "svg", "callgrind"};
  script s = {data + 4, size >= 4 ? size - 4 : 0};
  ks_sink sink;
  ei_x_buff x;
  char *txt = NULL;
  int code, k, idx = 0;

  if (size < 4 || ks_sink_init(&sink, NULL, keep_reply, NULL) != KS_OK)
    return 0;
  ts = 1000000;
  start(&sink, data);
  while ((code = byte(&s)) >= 0)
    op(&sink, &s, code);
  command_begin(&x, "flame_write", 6);
  ei_x_encode_long(&x, 1);
  ei_x_encode_longlong(&x, ts + 1000);
  ei_x_encode_binary(&x, dir, (long)strlen(dir));
  ei_x_encode_binary(&x, "cap", 3);
  ei_x_encode_list_header(&x, 5);
  for (k = 0; k < 5; k++)
    ei_x_encode_atom(&x, formats[k]);
  ei_x_encode_empty_list(&x);
  feed(&sink, &x);
  /* {kprof_reply, Ref, Reply}: {ok, Paths, Info} or {error, no_events | enomem, ...}.
   * (Not printed whole: Info's top rows hold the script's atoms, which need not be
   * UTF-8, as no atom of the VM's is.) */
  if (reply == NULL || reply_len < 5)
    abort();
  {
    const char *p = (const char *)reply + 4;
    char tag[MAXATOMLEN_UTF8], what[MAXATOMLEN_UTF8] = "";
    int ver, ar, ar2;
    if (ei_decode_version(p, &idx, &ver) || ei_decode_tuple_header(p, &idx, &ar) ||
        ei_decode_atom(p, &idx, tag) || ei_skip_term(p, &idx) ||
        ei_decode_tuple_header(p, &idx, &ar2) || ei_decode_atom(p, &idx, tag)) {
      fprintf(stderr, "fuzz_writers: the last reply is not {kprof_reply, Ref, {Tag, ...}}\n");
      abort();
    }
    if (strcmp(tag, "ok") == 0) {
      check_files();
    } else if (strcmp(tag, "error") != 0 || ei_decode_atom(p, &idx, what) != 0 ||
               (strcmp(what, "no_events") != 0 && strcmp(what, "enomem") != 0)) {
      idx = 0;
      ei_s_print_term(&txt, p, &idx);
      fprintf(stderr, "fuzz_writers: flame_write answered %s (%s, %s)\n", txt ? txt : "?", tag, what);
      abort();
    }
  }
  free(txt);
  free(reply);
  reply = NULL;
  ks_sink_free(&sink);
  return 0;
}
