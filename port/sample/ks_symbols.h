/* ks_symbols.h: what a sampled address is called. JIT code is named by the
 * VM's perf map (perf_map.c), the runtime's C code by the ELF symbols of
 * beam.smp and its libraries (elf_syms.c).
 *
 * Names become frames through the sampler's callback (ks_sym_name_fn): an
 * Erlang function M:F/A, or a native symbol ("[C] erts_garbage_collect",
 * "[JIT] global::call_bif_shared"); the tables here keep the frame ids.
 */
#ifndef KS_SYMBOLS_H
#define KS_SYMBOLS_H

#include "core/ks.h"

/* What a name says: an Erlang function, a symbol of the JIT's own code in
 * the perf map (ks_pmap_parse_name), or a C symbol (or file) of the ELF. */
enum { KS_PNAME_ERLANG = 0, KS_PNAME_NATIVE = 1, KS_PNAME_C = 2 };
typedef struct ks_pname {
  int kind;
  char m[1024], f[1024];       /* ERLANG: the atoms' text, UTF-8, unquoted */
  uint32_t arity;
  char native[2048];           /* NATIVE: the name as the map has it, less its `$';
                                * C: the symbol, or the file's base name */
} ks_pname;

/* The perf map's name text (a line less its address and size), as OTP 25 to 29
 * write it: `$M:F/A' (atoms quoted as Erlang prints them when they need it,
 * `-CodeInfoPrologue' after the prologue of a function's code), `$M::codeHeader',
 * `$global::Name' (the JIT's shared code). KS_OK, or KS_EINVAL for text too
 * long to keep. */
int ks_pmap_parse_name(const char *s, size_t n, ks_pname *out);

/* A name made a frame: the sampler's callback (a frame id, KS_NONE when it
 * could not be kept). */
typedef uint32_t (*ks_sym_name_fn)(void *ctx, const ks_pname *name);

/* One line of the map: [start, end) is `frame' for samples at or after
 * `since' and before `until' (the sink's CLOCK_MONOTONIC ns). */
typedef struct ks_pmap_ent {
  uint64_t start, end;
  int64_t since, until;
  uint64_t seq;                /* its line number: of two lines that overlap, the later wins */
  uint32_t frame;
} ks_pmap_ent;

/*
 * The perf map as it was at each moment. It is append-only: a module
 * loaded adds lines, and code loaded where a purged module was reuses its
 * addresses. The sink reads the new bytes at every drain. A line first
 * seen at a read is valid from the read before it (the last that did not
 * see it), so a sample of the new code is never named by the old; lines
 * of the first read are valid from the start. A line that covers older
 * ones retires them: they stay, valid until then, for the samples taken
 * before (a sample between the two reads is named by the new line: the
 * one such window, as long as the time between two drains: 10 ms, up to
 * 50 ms at low rates, ks_sampling_drain_ms).
 */
/* A lookup remembered: a deep stack's return addresses come back sample
 * after sample. Good while the map is the same (gen) and for samples at or
 * after `since' (the line's). */
#define KS_PMAP_CACHE 4096
typedef struct ks_pmap_hit {
  uint64_t ip;
  int64_t since;
  uint32_t frame, gen;
} ks_pmap_hit;

typedef struct ks_pmap {
  ks_pmap_ent *cur;            /* valid now: sorted by start, never overlapping */
  uint32_t n, cap;
  ks_pmap_ent *old;            /* retired, in the order they were */
  uint32_t nold, capold;
  ks_pmap_ent *fresh;          /* lines of the read under way */
  uint32_t nfresh, capfresh;
  char line[4096];             /* a line not yet ended */
  size_t line_n;
  int64_t last_read;           /* when the previous read was (INT64_MIN: none yet) */
  int fd;                      /* the file, -1 when not open */
  /* Called with each read's bytes and time (a recording's), NULL: none. */
  void (*tap)(void *ctx, int64_t now, const char *p, size_t n);
  void *tap_ctx;
  uint64_t lines, bad_lines;   /* lines read; of them, not understood */
  uint64_t retired;            /* lines a later line covered */
  uint32_t gen;                /* changes with every commit that changed cur */
  ks_pmap_hit *cache;          /* KS_PMAP_CACHE of them (NULL: none) */
} ks_pmap;

void ks_pmap_init(ks_pmap *m);
void ks_pmap_free(ks_pmap *m);
/* Bytes of the map (any split) read at `now': whole lines are parsed and
 * named through name_fn; the read ends with ks_pmap_commit. */
void ks_pmap_feed(ks_pmap *m, const char *p, size_t n, ks_sym_name_fn name_fn, void *ctx);
/* The lines of this read join the map, valid from the previous read. KS_OK
 * or KS_ENOMEM (the lines are dropped, counted as bad). */
int ks_pmap_commit(ks_pmap *m, int64_t now);
/* Opens the VM's map (/proc/OSPID/root/tmp/perf-OSPID.map, then
 * /tmp/perf-OSPID.map): KS_OK, or -errno (-ENOENT: no such map, the VM has
 * no +JPperf map). */
int ks_pmap_open(ks_pmap *m, int ospid);
/* Reads what the file gained since the last read, at `now'. */
int ks_pmap_read(ks_pmap *m, int64_t now, ks_sym_name_fn name_fn, void *ctx);
/* The frame of addr at time ts, KS_NONE when no line of the map named it then. */
uint32_t ks_pmap_lookup(ks_pmap *m, uint64_t addr, int64_t ts);

/* ELF symbols of the files mapped executable in the VM (elf_syms.c). */
typedef struct ks_esym {
  uint64_t start, end;         /* link-time addresses */
  uint32_t name;               /* offset in the module's names */
  uint8_t bind;                /* STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2 */
} ks_esym;

typedef struct ks_emod {
  uint64_t lo, hi;             /* the executable mapping in the VM */
  uint64_t off;                /* its offset in the file */
  uint32_t file;               /* index into the files */
} ks_emod;

typedef struct ks_efile {
  char *path;                  /* as /proc/PID/maps names it */
  char *base;                  /* its last component, for unnamed addresses */
  ks_esym *syms;
  uint32_t nsyms;
  char *names;
  uint32_t *frames;            /* per symbol: its frame once named (KS_NONE before) */
  uint32_t file_frame;         /* the file's frame, for addresses no symbol holds */
  uint64_t bias;               /* run-time address - link-time address */
  int loaded;                  /* its symbols were read (or could not be: none) */
} ks_efile;

typedef struct ks_elf {
  int ospid;
  char root[64];               /* where the VM's files are: /proc/OSPID/root */
  ks_emod *mods;               /* sorted by lo */
  uint32_t nmods, capmods;
  ks_efile *files;
  uint32_t nfiles, capfiles;
  uint64_t scans;              /* reads of /proc/PID/maps */
} ks_elf;

void ks_elf_init(ks_elf *e, int ospid);
void ks_elf_free(ks_elf *e);
/* Reads the VM's executable mappings (again: files seen before are kept). */
int ks_elf_scan(ks_elf *e);
/* The same from text laid out as /proc/PID/maps, files opened under root
 * ("" for /): tests give recorded maps and a directory of their own. */
int ks_elf_scan_text(ks_elf *e, const char *text, size_t n, const char *root);
/* The frame of addr in C code: its symbol's, else its file's for an address
 * of a mapped file that no symbol holds; KS_NONE when no mapping holds it.
 * Names are made through name_fn (kind KS_PNAME_C) once each. */
uint32_t ks_elf_lookup(ks_elf *e, uint64_t addr, ks_sym_name_fn name_fn, void *ctx);

#endif
