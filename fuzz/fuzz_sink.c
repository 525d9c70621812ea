/* fuzz_sink.c: libFuzzer target for the sink's whole input path.
 *
 * Input: a 3-byte header, then the bytes of the stdin stream.
 *   h[0] bits 0-2  how the stream is cut into reads: one read; reads of h[1]+1
 *                  bytes; random 1..4096; byte by byte; main.c's way (framer
 *                  space with 64 KiB or 1..16 free, random fill); random 1..16
 *                  (tiny reads stop after the first 2-16 KiB, see feed_chunks)
 *        bits 3-4  max_frame: default (64 MiB), 16, 300 or 4096 bytes
 *        bit  5    read_buf: 64 bytes (growth paths) or 64 KiB
 *        bits 6-7  intern caps: default, 4, 64 or 1 entries per table
 *   h[1], h[2]     parameters of the cut (chunk size, PRNG seed)
 *
 * The stream goes through ks_sink_feed (or ks_framer_space/commit as main.c
 * does), then ks_sink_eof; afterwards `calls`, `stats` and `{tiers_report, true}`
 * are asked directly so their encoders see whatever state the input left.
 * Every reply frame the sink emits must be a whole {packet,4} frame whose
 * payload ei decodes to exactly its length, shaped {kprof_reply, Ref, Reply}
 * or {kprof_alert, Kind, Info}. The counters must add up.
 *
 * Inputs naming `flame_write`, `tiers_full_write` or `flame_dir` (they make
 * directories and write files wherever the input says) are skipped: fuzz_writers
 * drives the writers into a directory of its own; so are the `sample_'
 * commands (they sample whatever process the input names, and record where
 * it says): fuzz_sample fuzzes what a sampler reads. (The product sink it links has no `test_delay_us`:
 * that hook is only in the fault-injection build, `make` FAULT_SINK.)
 * KPROF_FUZZ_LAX_ECHO=1 tolerates one known class of bad reply: the sink
 * echoes the command's Ref (and an unknown Command) verbatim, so a Ref that
 * its own bounds-checked reader accepts but ei/binary_to_term rejects comes
 * back undecodable (reported; see fuzz/README.md). Everything else aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ei.h>

#include "sink/ks_sink.h"

static int lax_echo = -1;

static void die(const char *what, const unsigned char *frame, size_t len) {
  size_t i;

  fprintf(stderr, "fuzz_sink: %s (reply of %zu bytes):", what, len);
  for (i = 0; i < len && i < 256; i++)
    fprintf(stderr, " %02x", frame[i]);
  fprintf(stderr, "%s\n", len > 256 ? " ..." : "");
  abort();
}

/* A reply part that came from the input: bad only if strict. */
static void echoed_part_bad(const char *what, const unsigned char *frame, size_t len) {
  if (lax_echo)
    return;
  die(what, frame, len);
}

static void check_reply(void *ctx, const unsigned char *frame, size_t len) {
  const char *p = (const char *)frame + 4;
  int i = 0, j, ver, arity, plen;
  char tag[MAXATOMLEN_UTF8];

  (void)ctx;
  if (len < 4 || ks_be32(frame) != len - 4)
    die("length prefix does not match the frame", frame, len);
  if (len - 4 > INT32_MAX)
    die("reply too big", frame, len);
  plen = (int)(len - 4);
  /* The whole term first: the strict check of the issue. */
  j = 0;
  if (ei_decode_version(p, &j, &ver) == 0 && ei_skip_term(p, &j) == 0 && j == plen)
    goto shape;
  /* It failed: find out whether the bad part is one the sink copied from its input. */
  if (ei_decode_version(p, &i, &ver) != 0 || ei_decode_tuple_header(p, &i, &arity) != 0 ||
      arity != 3 || ei_decode_atom(p, &i, tag) != 0)
    die("reply is not {Tag, _, _} to ei", frame, len);
  if (ei_skip_term(p, &i) != 0) {
    echoed_part_bad("the echoed Ref is not a term ei can decode", frame, len);
    return;
  }
  {
    /* {error, {unknown_command, Cmd}}: Cmd is echoed too. */
    int k = i, a2;
    char at[MAXATOMLEN_UTF8];
    if (ei_decode_tuple_header(p, &k, &a2) == 0 && a2 == 2 && ei_decode_atom(p, &k, at) == 0 &&
        strcmp(at, "error") == 0 && ei_decode_tuple_header(p, &k, &a2) == 0 && a2 == 2 &&
        ei_decode_atom(p, &k, at) == 0 && strcmp(at, "unknown_command") == 0) {
      echoed_part_bad("the echoed unknown Command is not a term ei can decode", frame, len);
      return;
    }
  }
  die("reply is not a whole term to ei (not an echo)", frame, len);

shape:
  i = 0;
  if (ei_decode_version(p, &i, &ver) != 0 || ei_decode_tuple_header(p, &i, &arity) != 0 ||
      arity != 3 || ei_decode_atom(p, &i, tag) != 0 ||
      (strcmp(tag, "kprof_reply") != 0 && strcmp(tag, "kprof_alert") != 0))
    die("reply is not {kprof_reply | kprof_alert, _, _}", frame, len);
}

/* xorshift32: reproducible chunk sizes from the header's seed. */
static uint32_t rnd(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* Reads as main.c does them: into the framer's own buffer, any amount up to the room. */
static void feed_space(ks_sink *s, const uint8_t *d, size_t n, uint32_t seed, size_t min_free) {
  while (n > 0) {
    unsigned char *p;
    size_t room, k;
    if (ks_framer_space(&s->fr, min_free, &p, &room) != KS_OK)
      return;
    if (room < min_free)
      abort();   /* the contract of ks_framer_space */
    k = 1 + rnd(&seed) % room;
    if (k > n)
      k = n;
    memcpy(p, d, k);
    ks_framer_commit(&s->fr, k, ks_sink_frame, s);
    d += k;
    n -= k;
  }
}

/*
 * Reads of `fixed` bytes, or of 1..span bytes at random. Tiny reads cost a
 * framer call per byte or two: past the first `tiny_end` bytes the reads
 * become 1..4096 bytes so long inputs keep the fuzzer fast.
 */
static void feed_chunks(ks_sink *s, const uint8_t *d, size_t n, size_t fixed, uint32_t seed,
                        uint32_t span, size_t tiny_end) {
  size_t done = 0;

  while (done < n) {
    size_t k;
    if (done >= tiny_end)
      k = 1 + rnd(&seed) % 4096;
    else
      k = fixed ? fixed : 1 + rnd(&seed) % span;
    if (k > n - done)
      k = n - done;
    if (ks_sink_feed(s, d + done, k) != KS_OK)
      return;
    done += k;
  }
}

/* Ref 7 (SMALL_INTEGER_EXT) and Command, as the decoder would slice them; arg: an atom or NULL. */
static void ask(ks_sink *s, const char *cmd, const char *arg) {
  unsigned char ref[2] = {KS_TAG_SMALL_INTEGER, 7}, c[64];
  size_t n = 0, k;
  ks_slice r = {ref, 2}, cm = {c, 0};

  if (arg != NULL) {
    c[n++] = KS_TAG_SMALL_TUPLE;
    c[n++] = 2;
  }
  k = strlen(cmd);
  c[n++] = KS_TAG_SMALL_ATOM_UTF8;
  c[n++] = (unsigned char)k;
  memcpy(c + n, cmd, k);
  n += k;
  if (arg != NULL) {
    k = strlen(arg);
    c[n++] = KS_TAG_SMALL_ATOM_UTF8;
    c[n++] = (unsigned char)k;
    memcpy(c + n, arg, k);
    n += k;
  }
  cm.n = n;
  ks_control_command(s, r, cm);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *e = getenv("KPROF_FUZZ_LAX_ECHO");

  (void)argc;
  (void)argv;
  ei_init();
  lax_echo = e != NULL && *e != 0 && *e != '0';
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t max_frames[4] = {64u << 20, 16, 300, 4096};
  static const uint32_t caps[4] = {1u << 20, 4, 64, 1};
  ks_sink_opts o;
  ks_sink s;
  uint8_t mode, a, b;
  uint32_t seed;
  uint64_t accounted;

  if (size < 3)
    return 0;
  /* These make directories and write files wherever the input says. */
  if (memmem(data, size, "flame_write", 11) != NULL ||
      memmem(data, size, "tiers_full_write", 15) != NULL ||
      memmem(data, size, "flame_dir", 9) != NULL ||
      memmem(data, size, "sample_", 7) != NULL)
    return 0;
  mode = data[0];
  a = data[1];
  b = data[2];
  data += 3;
  size -= 3;
  seed = ((uint32_t)a << 8 | b) + 1;

  ks_sink_default_opts(&o);
  o.max_frame = max_frames[(mode >> 3) & 3];
  o.read_buf = (mode & 32) ? 64 : 64 * 1024;
  o.limits.max_mfas = o.limits.max_pids = o.limits.max_terms = caps[(mode >> 6) & 3];
  if (ks_sink_init(&s, &o, check_reply, NULL) != KS_OK)
    return 0;

  switch (mode & 7) {
  case 0: ks_sink_feed(&s, data, size); break;                   /* one read */
  case 1: feed_chunks(&s, data, size, (size_t)a + 1, 0, 0, 16384); break; /* fixed size */
  case 2: feed_chunks(&s, data, size, 0, seed, 4096, size); break;        /* random, large */
  case 3: feed_chunks(&s, data, size, 1, seed, 0, 2048); break;           /* byte by byte */
  case 4: feed_space(&s, data, size, seed, 64 * 1024); break;             /* main.c's reads */
  case 5: feed_space(&s, data, size, seed, 1 + b % 16); break;
  default: feed_chunks(&s, data, size, 0, seed, 1u + (a & 15), 8192); break; /* random, tiny */
  }
  ks_sink_eof(&s);

  /* Every frame is accounted for exactly once (`reset` zeroes both sides). */
  accounted = s.fr.empty + s.st.trace_events + s.st.commands + s.st.decode_errors +
              s.st.unknown + s.st.dropped;
  if (accounted != s.fr.frames) {
    fprintf(stderr, "fuzz_sink: frames %llu != empty %llu + trace_events %llu + commands %llu"
                    " + decode_errors %llu + unknown %llu + dropped %llu\n",
            (unsigned long long)s.fr.frames, (unsigned long long)s.fr.empty,
            (unsigned long long)s.st.trace_events, (unsigned long long)s.st.commands,
            (unsigned long long)s.st.decode_errors, (unsigned long long)s.st.unknown,
            (unsigned long long)s.st.dropped);
    abort();
  }
  if (s.in.n_mfas > s.in.max_mfas || s.in.n_pids > s.in.max_pids ||
      s.in.n_terms > s.in.max_terms) {
    fprintf(stderr, "fuzz_sink: an intern table grew past its cap\n");
    abort();
  }
  ask(&s, "calls", NULL);
  ask(&s, "stats", NULL);
  ask(&s, "tiers_report", "true");
  ks_sink_free(&s);
  return 0;
}
