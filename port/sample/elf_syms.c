/* elf_syms.c: names of C code in the VM from the ELF symbols of the files it
 * maps executable (beam.smp, libc, a NIF's library): .symtab when the file
 * has one (or its debug file, /usr/lib/debug/.build-id/xx/yyyy.debug, does),
 * else .dynsym. Debian's beam.smp is stripped: its .dynsym names the
 * functions it exports, and an address in any other is its file's
 * (`[C] beam.smp'), never the nearest symbol's.
 *
 * ELF64 little-endian only (x86-64, aarch64), read with memcpy from the
 * file mapped read-only; the layouts are the ABI's, written out here so
 * that no <elf.h> is needed. A file that is not such an ELF, or cannot be
 * read, has no symbols: its addresses are its file's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ks_symbols.h"

enum { SHT_SYMTAB = 2, SHT_NOTE = 7, SHT_DYNSYM = 11, STT_FUNC = 2, STT_GNU_IFUNC = 10,
       PT_LOAD = 1, NT_GNU_BUILD_ID = 3 };

typedef struct elf_view {
  const unsigned char *p;
  size_t n;
} elf_view;

static uint64_t u64(const elf_view *v, uint64_t at) {
  uint64_t x = 0;

  if (at <= v->n && v->n - at >= 8)
    memcpy(&x, v->p + at, 8);
  return x;
}

static uint32_t u32(const elf_view *v, uint64_t at) {
  uint32_t x = 0;

  if (at <= v->n && v->n - at >= 4)
    memcpy(&x, v->p + at, 4);
  return x;
}

static uint16_t u16(const elf_view *v, uint64_t at) {
  uint16_t x = 0;

  if (at <= v->n && v->n - at >= 2)
    memcpy(&x, v->p + at, 2);
  return x;
}

static int is_elf64le(const elf_view *v) {
  return v->n >= 64 && memcmp(v->p, "\177ELF", 4) == 0 && v->p[4] == 2 && v->p[5] == 1 &&
         u16(v, 58) == 64 && u16(v, 54) == 56;
}

/* Section k's header offset, 0 when there is no such section. */
static uint64_t section(const elf_view *v, uint32_t k) {
  uint64_t off = u64(v, 40);
  uint16_t shnum = u16(v, 60);

  if (k >= shnum || off > v->n || (v->n - off) / 64 < shnum)
    return 0;
  return off + 64ull * k;
}

/* The symbol table of type `type' and its string table; 0 when none. */
static uint64_t symtab(const elf_view *v, uint32_t type, uint64_t *strsh) {
  uint16_t k, shnum = u16(v, 60);

  for (k = 0; k < shnum; k++) {
    uint64_t sh = section(v, k);
    if (sh != 0 && u32(v, sh + 4) == type) {
      *strsh = section(v, u32(v, sh + 40));
      return *strsh != 0 ? sh : 0;
    }
  }
  return 0;
}

/* The link-time address of file offset `off' (its PT_LOAD's), so that
 * bias = run-time address of the mapping - that. */
static int link_addr(const elf_view *v, uint64_t off, uint64_t *addr) {
  uint64_t ph = u64(v, 32);
  uint16_t k, phnum = u16(v, 56);

  if (ph > v->n || (v->n - ph) / 56 < phnum)
    return KS_EINVAL;
  for (k = 0; k < phnum; k++) {
    uint64_t at = ph + 56ull * k, p_off = u64(v, at + 8), filesz = u64(v, at + 32);
    if (u32(v, at) == PT_LOAD && off >= p_off && off - p_off < (filesz ? filesz : 1)) {
      *addr = u64(v, at + 16) + (off - p_off);
      return KS_OK;
    }
  }
  return KS_EINVAL;
}

static int by_start(const void *a, const void *b) {
  const ks_esym *x = a, *y = b;

  return x->start < y->start ? -1 : x->start > y->start;
}

static size_t underscores(const char *s) {
  size_t n = 0;

  while (s[n] == '_')
    n++;
  return n;
}

/* Of two symbols at one address (memcpy's and memmove's in libc), the one
 * named: not weak, then global, then with fewer leading underscores, then the
 * longer name, then the first in byte order (the rules perf follows too, so
 * both tools name the address alike). Nonzero when a is the better. */
static int better(const ks_efile *f, const ks_esym *a, const ks_esym *b) {
  const char *na = f->names + a->name, *nb = f->names + b->name;
  size_t ua = underscores(na), ub = underscores(nb), la = strlen(na), lb = strlen(nb);

  if ((a->bind == 2) != (b->bind == 2))
    return b->bind == 2;
  if ((a->bind == 1) != (b->bind == 1))
    return a->bind == 1;
  if (ua != ub)
    return ua < ub;
  if (la != lb)
    return la > lb;
  return strcmp(na, nb) < 0;
}

/* One symbol per address: the best of each run that shares a start. */
static uint32_t dedupe(ks_efile *f, uint32_t n) {
  uint32_t k, out = 0;

  for (k = 0; k < n; k++) {
    if (out > 0 && f->syms[out - 1].start == f->syms[k].start) {
      if (better(f, &f->syms[k], &f->syms[out - 1]))
        f->syms[out - 1] = f->syms[k];
      continue;
    }
    f->syms[out++] = f->syms[k];
  }
  return out;
}

/* The functions of the table at sh (names in the table at strsh) into f. */
static int read_syms(ks_efile *f, const elf_view *v, uint64_t sh, uint64_t strsh) {
  uint64_t off = u64(v, sh + 24), size = u64(v, sh + 32), ent = u64(v, sh + 56);
  uint64_t soff = u64(v, strsh + 24), ssize = u64(v, strsh + 32), k, n;
  uint32_t names = 0, kept = 0;

  if (ent != 24 || off > v->n || size > v->n - off || soff > v->n || ssize > v->n - soff)
    return KS_EINVAL;
  n = size / 24;
  if (n > UINT32_MAX / 2 || ssize > UINT32_MAX ||
      (f->syms = malloc((size_t)(n ? n : 1) * sizeof(*f->syms))) == NULL ||
      (f->names = malloc((size_t)ssize + 1)) == NULL)
    return KS_ENOMEM;
  memcpy(f->names, v->p + soff, (size_t)ssize);
  f->names[ssize] = 0;
  names = (uint32_t)ssize;
  for (k = 0; k < n; k++) {
    uint64_t at = off + 24 * k, value = u64(v, at + 8), sz = u64(v, at + 16);
    uint32_t name = u32(v, at);
    unsigned type = v->p[at + 4] & 0xf;
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sz == 0 || value == 0 || name >= names ||
        f->names[name] == 0)
      continue;
    f->syms[kept].start = value;
    f->syms[kept].end = value + sz;
    f->syms[kept].bind = (uint8_t)((v->p[at + 4] >> 4) > 2 ? 0 : v->p[at + 4] >> 4);
    f->syms[kept++].name = name;
  }
  qsort(f->syms, kept, sizeof(*f->syms), by_start);
  f->nsyms = dedupe(f, kept);
  return KS_OK;
}

static int map_file(const char *path, elf_view *v) {
  struct stat st;
  void *p;
  int fd = open(path, O_RDONLY | O_CLOEXEC);

  if (fd < 0)
    return -errno;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 64) {
    close(fd);
    return -EINVAL;
  }
  p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return -errno;
  v->p = p;
  v->n = (size_t)st.st_size;
  return KS_OK;
}

/* The debug file the build id names, under root: its path into out, or 0. */
static int debug_path(const elf_view *v, const char *root, char *out, size_t cap) {
  uint16_t k, shnum = u16(v, 60);

  for (k = 0; k < shnum; k++) {
    uint64_t sh = section(v, k), off, size, at;
    if (sh == 0 || u32(v, sh + 4) != SHT_NOTE)
      continue;
    off = u64(v, sh + 24);
    size = u64(v, sh + 32);
    for (at = off; off <= v->n && size <= v->n - off && at + 12 <= off + size;) {
      uint32_t namesz = u32(v, at), descsz = u32(v, at + 4), type = u32(v, at + 8);
      uint64_t desc = at + 12 + ((namesz + 3ull) & ~3ull);
      if (type == NT_GNU_BUILD_ID && namesz == 4 && memcmp(v->p + at + 12, "GNU", 4) == 0 &&
          descsz >= 2 && descsz <= 64 && desc + descsz <= off + size) {
        size_t o = (size_t)snprintf(out, cap, "%s/usr/lib/debug/.build-id/%02x/", root,
                                    v->p[desc]);
        uint32_t d;
        for (d = 1; d < descsz && o + 3 < cap; d++)
          o += (size_t)snprintf(out + o, cap - o, "%02x", v->p[desc + d]);
        return o + 7 < cap && snprintf(out + o, cap - o, ".debug") > 0;
      }
      at = desc + ((descsz + 3ull) & ~3ull);
    }
  }
  return 0;
}

/* Reads f's symbols (once): its debug file's .symtab, else its own .symtab,
 * else its .dynsym; and its bias from the mapping m. */
static void load(ks_elf *e, ks_efile *f, const ks_emod *m) {
  char path[4096], dbg[4200];
  elf_view v, d;
  uint64_t sh = 0, strsh = 0, at;

  f->loaded = 1;
  snprintf(path, sizeof(path), "%s%s", e->root, f->path);
  if (map_file(path, &v) != KS_OK)
    return;
  if (is_elf64le(&v) && link_addr(&v, m->off, &at) == KS_OK) {
    f->bias = m->lo - at;
    if (debug_path(&v, e->root, dbg, sizeof(dbg)) && map_file(dbg, &d) == KS_OK) {
      if (is_elf64le(&d) && (sh = symtab(&d, SHT_SYMTAB, &strsh)) != 0)
        read_syms(f, &d, sh, strsh);
      munmap((void *)d.p, d.n);
    }
    if (f->nsyms == 0) {
      free(f->syms);
      free(f->names);
      f->syms = NULL;
      f->names = NULL;
      if ((sh = symtab(&v, SHT_SYMTAB, &strsh)) == 0)
        sh = symtab(&v, SHT_DYNSYM, &strsh);
      if (sh != 0)
        read_syms(f, &v, sh, strsh);
    }
  }
  munmap((void *)v.p, v.n);
  if (f->nsyms > 0 && (f->frames = malloc((size_t)f->nsyms * sizeof(*f->frames))) != NULL)
    memset(f->frames, 0xff, (size_t)f->nsyms * sizeof(*f->frames));   /* KS_NONE */
  else
    f->nsyms = 0;
}

void ks_elf_init(ks_elf *e, int ospid) {
  memset(e, 0, sizeof(*e));
  e->ospid = ospid;
  snprintf(e->root, sizeof(e->root), "/proc/%d/root", ospid);
}

void ks_elf_free(ks_elf *e) {
  uint32_t k;

  for (k = 0; k < e->nfiles; k++) {
    free(e->files[k].path);
    free(e->files[k].syms);
    free(e->files[k].names);
    free(e->files[k].frames);
  }
  free(e->files);
  free(e->mods);
  memset(e, 0, sizeof(*e));
}

static uint32_t file_of(ks_elf *e, const char *path, size_t n) {
  uint32_t k;
  ks_efile *f;
  const char *slash;

  for (k = 0; k < e->nfiles; k++)
    if (strlen(e->files[k].path) == n && memcmp(e->files[k].path, path, n) == 0)
      return k;
  if (ks_grow(&e->files, &e->capfiles, e->nfiles, 8, sizeof(*e->files)) != KS_OK)
    return KS_NONE;
  f = &e->files[e->nfiles];
  memset(f, 0, sizeof(*f));
  if ((f->path = malloc(n + 1)) == NULL)
    return KS_NONE;
  memcpy(f->path, path, n);
  f->path[n] = 0;
  slash = strrchr(f->path, '/');
  f->base = slash ? (char *)slash + 1 : f->path;
  f->file_frame = KS_NONE;
  return e->nfiles++;
}

static int mod_by_lo(const void *a, const void *b) {
  const ks_emod *x = a, *y = b;

  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* One line of /proc/PID/maps: `lo-hi perms off dev inode path'. */
static void map_line(ks_elf *e, const char *s, size_t n) {
  unsigned long long lo, hi, off;
  char perms[8];
  int at = 0;
  const char *path;
  size_t plen;
  ks_emod *m;
  uint32_t f;

  if (sscanf(s, "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, perms, &off, &at) < 4 || at <= 0 ||
      (size_t)at >= n || strchr(perms, 'x') == NULL || s[at] != '/' || hi <= lo)
    return;
  path = s + at;
  plen = n - (size_t)at;
  if (plen > 10 && memcmp(path + plen - 10, " (deleted)", 10) == 0)
    return;   /* gone from the disk: nothing to read names from */
  if ((f = file_of(e, path, plen)) == KS_NONE ||
      ks_grow(&e->mods, &e->capmods, e->nmods, 16, sizeof(*e->mods)) != KS_OK)
    return;
  m = &e->mods[e->nmods++];
  m->lo = lo;
  m->hi = hi;
  m->off = off;
  m->file = f;
}

int ks_elf_scan_text(ks_elf *e, const char *text, size_t n, const char *root) {
  const char *end = text + n, *nl;
  char line[4352];

  if (root != NULL)
    snprintf(e->root, sizeof(e->root), "%s", root);
  e->nmods = 0;
  e->scans++;
  for (; text < end; text = nl + 1) {
    size_t len;
    nl = memchr(text, '\n', (size_t)(end - text));
    if (nl == NULL)
      nl = end;
    len = (size_t)(nl - text);
    if (len < sizeof(line)) {
      memcpy(line, text, len);
      line[len] = 0;
      map_line(e, line, len);
    }
  }
  qsort(e->mods, e->nmods, sizeof(*e->mods), mod_by_lo);
  return KS_OK;
}

int ks_elf_scan(ks_elf *e) {
  char path[64], *text = NULL;
  size_t n = 0, cap = 0;
  ssize_t k;
  int fd, rc;

  snprintf(path, sizeof(path), "/proc/%d/maps", e->ospid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return -errno;
  for (;;) {
    if (n + 65536 > cap) {
      char *t = realloc(text, cap = cap ? cap * 2 : 262144);
      if (t == NULL) {
        free(text);
        close(fd);
        return KS_ENOMEM;
      }
      text = t;
    }
    if ((k = read(fd, text + n, cap - n)) < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    n += (size_t)k;
  }
  close(fd);
  rc = ks_elf_scan_text(e, text, n, NULL);
  free(text);
  return rc;
}

/* The frame of f's symbol k, or of f itself (k KS_NONE), made once. */
static uint32_t frame_of(ks_efile *f, uint32_t k, ks_sym_name_fn name_fn, void *ctx) {
  uint32_t *slot = k == KS_NONE ? &f->file_frame : &f->frames[k];
  ks_pname nm;

  if (*slot == KS_NONE) {
    nm.kind = KS_PNAME_C;
    snprintf(nm.native, sizeof(nm.native), "%s", k == KS_NONE ? f->base : f->names + f->syms[k].name);
    if (k != KS_NONE)
      nm.native[strcspn(nm.native, "@")] = 0;   /* pthread_mutex_lock@@GLIBC_2.2.5: the version */
    *slot = name_fn(ctx, &nm);
  }
  return *slot;
}

uint32_t ks_elf_lookup(ks_elf *e, uint64_t addr, ks_sym_name_fn name_fn, void *ctx) {
  uint32_t lo = 0, hi = e->nmods, s;
  const ks_emod *m;
  ks_efile *f;
  uint64_t at;

  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (e->mods[mid].lo <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0 || addr >= e->mods[lo - 1].hi)
    return KS_NONE;
  m = &e->mods[lo - 1];
  f = &e->files[m->file];
  if (!f->loaded)
    load(e, f, m);
  at = addr - f->bias;
  for (lo = 0, hi = f->nsyms; lo < hi;) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (f->syms[mid].start <= at)
      lo = mid + 1;
    else
      hi = mid;
  }
  s = lo > 0 && at < f->syms[lo - 1].end ? lo - 1 : KS_NONE;
  return frame_of(f, s, name_fn, ctx);
}
