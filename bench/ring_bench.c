/* ring_bench.c: what a record costs its writer, one shared ring against a ring per writer
 * (`make bench-ring`, issue 32).
 *
 *   ring_bench RECORDS ROUNDS FLOOR_NS
 *
 * Two designs of the tracer's ring, side by side:
 *   shared      the ring as it was up to format version 3, copied here as the
 *               baseline: every writer reserves its record by a compare-and-swap on
 *               one `head` word, fills it and publishes its first word (a position
 *               stamp) last; the reader walks the stamps, zeroes what it read and
 *               moves `tail`;
 *   per writer  include/ks_ring.h now: each writer claims a ring of its own and
 *               publishes its head per record; the reader is the sink's
 *               (ks_ring_drain: every ring walked, merged by time).
 * Each writer thread is pinned to a core of its own (1 writer: core 0; 2 writers:
 * cores 0 and 1) and writes RECORDS 48-byte records (a call of the pattern
 * `true': time, pid, M, F, arity) as the NIF does, its time from the NIF's clock
 * (nif/ks_vm_clock.h); a reader thread drains every millisecond, as the sink's
 * timer does at its fastest. The rings hold every record of a run, so no writer ever waits or
 * drops, and their pages are touched before the run (a ring in use has been
 * through its first lap: its page faults are not the record's cost). Cost per record: the writer thread's CPU time (CLOCK_THREAD_CPUTIME_ID:
 * not the time the reader or another process took its core) over RECORDS.
 * The four configurations run interleaved, ROUNDS times; medians.
 *
 * From the medians, the cost of moving the shared `head` line between two busy
 * cores (the 2-writer shared ring's extra cost per record, less the per-writer
 * rings' own 1-to-2-writer difference), and a projection of the cost per event
 * at 8, 32 and 128 busy schedulers, with FLOOR_NS the VM's own cost to hand a
 * NIF tracer one event (bench-overhead's null tracer). Prints a Markdown section.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ring/ks_ring_reader.h"
#include "../nif/ks_vm_clock.h"

#define REC 48
#define RING_BYTES (64u << 20)   /* per writer: a run's records fit, nothing waits */

/* ---- The shared ring of format version 3 (the baseline). ---- */

typedef struct old_ring {
  _Alignas(64) _Atomic uint64_t head;
  _Alignas(64) _Atomic uint64_t tail;
  _Alignas(64) _Atomic uint64_t drops;
  _Atomic uint32_t closed;
  unsigned char *data;
  uint64_t size;
} old_ring;

static int old_open(old_ring *o, uint64_t size) {
  int fd = memfd_create("ring_bench", 0);
  unsigned char *base;

  memset(o, 0, sizeof(*o));
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
    return -1;
  base = mmap(NULL, 2 * size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED ||
      mmap(base, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
      mmap(base + size, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
    return -1;
  close(fd);
  o->data = base;
  o->size = size;
  return 0;
}

static void old_close(old_ring *o) {
  munmap(o->data, 2 * o->size);
}

/* Version 3's ks_ring_reserve: a compare-and-swap on head, the tail cached; *retries
 * counts the compare-and-swaps another writer's got in between (a collision). */
static unsigned char *old_reserve(old_ring *o, size_t len, uint64_t *pos, uint64_t *tail_cache,
                                  uint64_t *retries) {
  uint64_t head = atomic_load_explicit(&o->head, memory_order_relaxed), tail = *tail_cache;
  int fresh = 0;

  for (;;) {
    if (head < tail) {
      if (!fresh) {
        tail = *tail_cache = atomic_load_explicit(&o->tail, memory_order_acquire);
        fresh = 1;
      } else {
        head = atomic_load_explicit(&o->head, memory_order_relaxed);
      }
      continue;
    }
    if (head + len - tail > o->size) {
      if (!fresh) {
        tail = *tail_cache = atomic_load_explicit(&o->tail, memory_order_acquire);
        fresh = 1;
        continue;
      }
      atomic_fetch_add_explicit(&o->drops, 1, memory_order_relaxed);
      return NULL;
    }
    if (atomic_load_explicit(&o->closed, memory_order_relaxed)) {
      atomic_fetch_add_explicit(&o->drops, 1, memory_order_relaxed);
      return NULL;
    }
    if (atomic_compare_exchange_weak_explicit(&o->head, &head, head + len, memory_order_relaxed,
                                              memory_order_relaxed))
      break;
    ++*retries;
  }
  *pos = head;
  return o->data + (head & (o->size - 1));
}

/* Version 3's reader: committed records by their stamps, zeroed once read. */
static void old_drain(old_ring *o) {
  uint64_t tail = atomic_load_explicit(&o->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&o->head, memory_order_acquire);

  while (tail < head) {
    unsigned char *rec = o->data + (tail & (o->size - 1));
    uint64_t w0 = atomic_load_explicit((_Atomic uint64_t *)(void *)rec, memory_order_acquire);
    size_t len = (size_t)(w0 >> 32) & 0xffff;
    if ((uint32_t)w0 != ks_ring_stamp(tail) || len == 0)
      break;
    memset(rec, 0, len);
    tail += len;
  }
  atomic_store_explicit(&o->tail, tail, memory_order_release);
}

/* ---- The run ---- */

typedef struct run {
  int per_writer;                 /* the design */
  int writers;
  long records;
  old_ring old;
  ks_ring_reader reader;
  ks_intern in;
  ks_vm_clock clock;
  _Atomic int ready, go, writing;
  double ns[2];                   /* per writer: CPU ns per record */
  double share[2];                /* per writer: its CPU time over its wall time */
  _Atomic uint64_t retries;       /* the shared ring's collisions, all writers */
  uint64_t drops;
} run;

typedef struct writer_arg {
  run *r;
  int id;
} writer_arg;

static double wall_ns(void);

static int64_t os_time(void) {
  return (int64_t)ks_os_ns();
}

static double thread_cpu_ns(void) {
  struct timespec t;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t set;

  CPU_ZERO(&set);
  CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void fill(unsigned char *rec, int64_t ts, uint64_t pid, long k) {
  ks_rec_mfa m;

  memset(&m, 0, sizeof(m));
  m.ts = ts;
  m.pid = pid;
  m.m = 0x1000b;
  m.f = 0x2000b;
  m.arity = (uint8_t)k;
  memcpy(rec + 8, (unsigned char *)&m + 8, sizeof(m) - 8);
}

static void *writer(void *arg) {
  writer_arg *a = arg;
  run *r = a->r;
  ks_vm_epoch mine = {0, 0, 0, 0};
  ks_ring_writer w = {0};
  uint64_t tail_cache = 0, pid = 0x4003 + ((uint64_t)a->id << 8), pos, retries = 0;
  double t0, w0;
  long k;

  pin(a->id);
  if (r->per_writer && ks_ring_claim(&w, r->reader.h, RING_BYTES, r->reader.rings,
                                     (uint64_t)a->id + 1) < 0)
    abort();
  atomic_fetch_add(&r->ready, 1);
  while (!atomic_load(&r->go))
    ;
  t0 = thread_cpu_ns();
  w0 = wall_ns();
  for (k = 0; k < r->records; k++) {
    int64_t ts = ks_vm_clock_now(&r->clock, &mine);
    unsigned char *rec;
    if (r->per_writer) {
      if ((rec = ks_ring_reserve(&w, REC)) == NULL)
        continue;
      fill(rec, ks_ring_time(&w, ts), pid, k);
      ks_ring_commit(&w, rec, REC, KS_REC_CALL_MFA, 0);
    } else {
      if ((rec = old_reserve(&r->old, REC, &pos, &tail_cache, &retries)) == NULL)
        continue;
      fill(rec, ts, pid, k);
      atomic_store_explicit((_Atomic uint64_t *)(void *)rec,
                            ks_ring_word0(pos, REC, KS_REC_CALL_MFA, 0), memory_order_release);
    }
  }
  r->ns[a->id] = (thread_cpu_ns() - t0) / (double)r->records;
  r->share[a->id] = r->ns[a->id] * (double)r->records / (wall_ns() - w0);
  atomic_fetch_add(&r->retries, retries);
  atomic_fetch_sub(&r->writing, 1);
  return NULL;
}

static void ignore(void *ctx, ks_decoded *d) {
  (void)ctx;
  (void)d;
}

/* The sink's timer: a drain every millisecond while the writers write, then the rest. */
static void *reader(void *arg) {
  run *r = arg;
  struct timespec ms = {0, 1000000};
  int more = 1;

  while (more) {
    more = atomic_load(&r->writing) > 0;
    if (r->per_writer)
      ks_ring_drain(&r->reader, &r->in, SIZE_MAX, ignore, NULL);
    else
      old_drain(&r->old);
    nanosleep(&ms, NULL);
  }
  return NULL;
}

/* One run: the mean over its writers of the CPU ns per record; *collisions the shared
 * ring's retries per record, *share the writers' mean share of their cores. */
static double one_run(int per_writer, int writers, long records, double *collisions,
                      double *share) {
  run *r = calloc(1, sizeof(*r));
  pthread_t w[2], rd;
  writer_arg args[2];
  double ns = 0;
  int k;

  if (r == NULL)
    abort();
  r->per_writer = per_writer;
  r->writers = writers;
  r->records = records;
  ks_vm_clock_init(&r->clock, os_time, ks_tsc_is_clocksource());
  if (per_writer) {
    ks_ring_reader_init(&r->reader);
    if (ks_intern_init(&r->in, NULL) != KS_OK ||
        ks_ring_open(&r->reader, RING_BYTES, (unsigned)writers + 1) != KS_OK)
      abort();
    ks_ring_unlink(&r->reader);
    for (k = 0; k < writers; k++)   /* each page touched once before: no faults timed */
      memset(ks_ring_data(ks_ring_at(r->reader.h, RING_BYTES, (unsigned)k)), 0, RING_BYTES);
  } else if (old_open(&r->old, (uint64_t)RING_BYTES * (uint64_t)writers) == 0) {
    memset(r->old.data, 0, (size_t)r->old.size);
  } else {
    abort();
  }
  atomic_store(&r->writing, writers);
  for (k = 0; k < writers; k++) {
    args[k] = (writer_arg){r, k};
    pthread_create(&w[k], NULL, writer, &args[k]);
  }
  while (atomic_load(&r->ready) < writers)
    sched_yield();
  pthread_create(&rd, NULL, reader, r);
  atomic_store(&r->go, 1);
  *share = 0;
  for (k = 0; k < writers; k++) {
    pthread_join(w[k], NULL);
    ns += r->ns[k] / writers;
    *share += r->share[k] / writers;
  }
  pthread_join(rd, NULL);
  *collisions = (double)atomic_load(&r->retries) / (double)(records * writers);
  if (per_writer) {
    r->drops = r->reader.drops_seen;
    ks_ring_close(&r->reader);
    ks_intern_free(&r->in);
  } else {
    r->drops = atomic_load(&r->old.drops);
    old_close(&r->old);
  }
  if (r->drops != 0) {
    fprintf(stderr, "ring_bench: %llu drops: the rings must hold a run\n",
            (unsigned long long)r->drops);
    exit(1);
  }
  pthread_mutex_destroy(&r->clock.lock);
  free(r);
  return ns;
}

/* ---- A cache line between two cores ---- */

#define PINGS 2000
#define BURSTS 200

typedef struct pingpong {
  _Alignas(64) _Atomic uint64_t turn;
  _Atomic int ready;
  double best, times[BURSTS];
} pingpong;

static double wall_ns(void) {
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The other side: answers every odd turn. */
static void *pong(void *arg) {
  pingpong *p = arg;
  uint64_t k;

  pin(1);
  atomic_store(&p->ready, 1);
  for (k = 1; k < 2ull * PINGS * BURSTS; k += 2) {
    while (atomic_load_explicit(&p->turn, memory_order_acquire) != k)
      ;
    atomic_store_explicit(&p->turn, k + 1, memory_order_release);
  }
  return NULL;
}

/* The time a store on one core takes to reach the other and back, halved: one move of
 * a line between the cores; bursts of PINGS round trips, the fastest burst's (a burst a
 * core was taken from in the middle of is slower, never faster). */
static double line_move_ns(double *median_out);

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* The median of v's n values (v is left as it was). */
static double median(const double *v, int n) {
  double *c = malloc((size_t)n * sizeof(*c)), m;

  if (c == NULL)
    abort();
  memcpy(c, v, (size_t)n * sizeof(*c));
  qsort(c, (size_t)n, sizeof(*c), cmp_double);
  m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
  free(c);
  return m;
}

static double line_move_ns(double *median_out) {
  pingpong *p = calloc(1, sizeof(*p));
  pthread_t th;
  uint64_t k = 0;
  int b;
  double best;

  if (p == NULL)
    abort();
  pthread_create(&th, NULL, pong, p);
  pin(0);
  while (!atomic_load(&p->ready))
    sched_yield();
  for (b = 0; b < BURSTS; b++) {
    double t0 = wall_ns();
    int i;
    for (i = 0; i < PINGS; i++, k += 2) {
      atomic_store_explicit(&p->turn, k + 1, memory_order_release);
      while (atomic_load_explicit(&p->turn, memory_order_acquire) != k + 2)
        ;
    }
    p->times[b] = (wall_ns() - t0) / (2.0 * PINGS);
  }
  pthread_join(th, NULL);
  *median_out = median(p->times, BURSTS);
  best = p->times[0];
  for (b = 1; b < BURSTS; b++)
    if (p->times[b] < best)
      best = p->times[b];
  free(p);
  return best;
}

/* The shared ring with w busy writers: each record takes the head line, which
 * moves between cores (t_x); the line serves one core at a time. */
static double shared_cost(double base, double tx, int w) {
  double rho = w * tx / (base + tx), wait;

  if (rho >= 1)
    return w * tx;
  wait = tx * rho / (2 * (1 - rho));   /* M/D/1 queueing on the line */
  return base + tx + wait;
}

static void load_average(char *out, size_t cap) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a, b, c;

  snprintf(out, cap, "?");
  if (f != NULL && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
    snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
  if (f != NULL)
    fclose(f);
}

static void project(double floor_ns, double old1, double new1, double tx) {
  static const int ws[] = {8, 32, 128};
  size_t k;

  printf("| busy schedulers | shared ring, ns/event | ring per writer, ns/event | shared / per writer |\n");
  printf("|--:|--:|--:|--:|\n");
  printf("| 1 (measured) | %.0f | %.0f | %.2f |\n", floor_ns + old1, floor_ns + new1,
         (floor_ns + old1) / (floor_ns + new1));
  for (k = 0; k < sizeof(ws) / sizeof(ws[0]); k++) {
    double s = shared_cost(floor_ns + old1, tx, ws[k]), p = floor_ns + new1;
    printf("| %d | %.0f | %.0f | %.1f |\n", ws[k], s, p, s / p);
  }
}

int main(int argc, char **argv) {
  static const char *names[] = {"shared ring (format 3)", "ring per writer",
                                "shared ring (format 3)", "ring per writer"};
  static const int per_writer[] = {0, 1, 0, 1}, writers[] = {1, 1, 2, 2};
  long records = argc > 1 ? atol(argv[1]) : 1000000;
  int rounds = argc > 2 ? atoi(argv[2]) : 7, k, c;
  double floor_ns = argc > 3 ? atof(argv[3]) : 400, m[4], tx, *v[4], move, move_median;
  double collide[32] = {0}, share[32] = {0}, coll, sh;
  char load0[64], load1[64];

  if (records <= 0 || records > (long)(RING_BYTES / REC) || rounds <= 0 || floor_ns < 0) {
    fprintf(stderr, "usage: ring_bench RECORDS (<= %u) ROUNDS FLOOR_NS\n", RING_BYTES / REC);
    return 2;
  }
  for (c = 0; c < 4; c++)
    if ((v[c] = calloc((size_t)rounds, sizeof(double))) == NULL)
      return 1;
  load_average(load0, sizeof(load0));
  if (rounds > 32)
    rounds = 32;
  for (k = 0; k < rounds; k++)
    for (c = 0; c < 4; c++)
      v[c][k] = one_run(per_writer[c], writers[c], records, c == 2 ? &collide[k] : &coll,
                        c == 2 ? &share[k] : &sh);
  move = line_move_ns(&move_median);
  load_average(load1, sizeof(load1));
  printf("`make bench-ring` (bench/ring_bench.c): what one 48-byte record costs its writer, the\n"
         "shared ring of format 3 (a compare-and-swap on one `head` per record) against a ring\n"
         "per writer (format 4, include/ks_ring.h), each writer thread pinned to a core of its\n"
         "own, a reader draining every millisecond as the sink does. %ld records per writer and\n"
         "run, the four configurations interleaved, %d rounds; cost = the writer thread's CPU\n"
         "time over its records (the time is the NIF's clock, the record a call's). Load\n"
         "average before / after: %s / %s.\n\n",
         records, rounds, load0, load1);
  printf("| writers, each pinned to a core | design | ns per record, median | each round's |\n");
  printf("|--:|---|--:|---|\n");
  for (c = 0; c < 4; c++) {
    m[c] = median(v[c], rounds);
    printf("| %d | %s | %.1f | ", writers[c], names[c], m[c]);
    for (k = 0; k < rounds; k++)
      printf("%s%.1f", k ? ", " : "", v[c][k]);
    printf(" |\n");
  }
  tx = (m[2] - m[0]) - (m[3] - m[1]);
  printf("\nWhat two writers cost each other on the shared ring, over what they cost each other\n"
         "with rings of their own (the reader, the shared caches): (%.1f - %.1f) - (%.1f - %.1f)\n"
         "= %.1f ns per record. That is the head line's price only while both writers run at\n"
         "once. In the 2-writer shared runs each writer had its core %.0f %% of its run's wall\n"
         "time (its CPU time over its wall time, median of the rounds) and their\n"
         "compare-and-swaps collided on %.2f %% of the records: with the machine's other load\n"
         "on the two vCPUs, the two writers seldom ran at the same instant, and this row\n"
         "does not show the line's price; the ping-pong below does.\n\n",
         m[2], m[0], m[3], m[1], tx, 100 * median(share, rounds), 100 * median(collide, rounds));
  printf("The move of a cache line between the two cores, t_x, measured alone: two threads\n"
         "pinned to cores 0 and 1 store to one line in turn, %d bursts of %d round trips; a\n"
         "move is half a round trip: fastest burst **%.1f ns**, median burst %.1f ns. The\n"
         "model below takes the fastest (the hardware's; a slower burst had a core taken away).\n\n",
         BURSTS, PINGS, move, move_median);
  tx = move;
  printf("The projection below is a model, not a measurement (this machine has %ld cores):\n"
         "- an event costs a busy scheduler F = %.0f ns of the VM's own before the NIF runs\n"
         "  (the null tracer's floor, bench-overhead) plus the record's cost measured above with\n"
         "  one writer;\n"
         "- with a ring per writer no line a writer stores to per record is stored to by another\n"
         "  core, so the cost does not depend on how many schedulers are busy;\n"
         "- with the shared ring every record takes the `head` line; with W schedulers busy the\n"
         "  line is almost always in another core's cache, so each record pays t_x more, and the\n"
         "  line serves one core at a time: it is busy W * t_x of every F + record + t_x ns.\n"
         "  Below saturation the wait is an M/D/1 queue's, t_x * rho / (2 (1 - rho)) with\n"
         "  rho = W t_x / (F + record + t_x); at or past saturation each scheduler gets one\n"
         "  record through every W * t_x ns. t_x is what these two vCPUs measured; across a\n"
         "  large server's mesh or between sockets a line moves in 100 to 300 ns, so the shared\n"
         "  ring's rows are, if anything, optimistic.\n\n",
         sysconf(_SC_NPROCESSORS_ONLN), floor_ns);
  project(floor_ns, m[0], m[1], tx);
  return 0;
}
