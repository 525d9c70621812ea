/* ks_vm_clock.h: the VM's monotonic time for trace records: cheap, and one clock for every thread.
 *
 * enif_monotonic_time costs ~100 ns here (the VM's time correction), more
 * than the rest of a record. So the writers read "ticks" instead: the CPU's
 * time stamp counter (~10 ns), read in order (below), when it is the kernel's clocksource
 * (invariant, and synchronised across cores, or the kernel would not use
 * it), else the OS monotonic clock (vDSO, ~20 ns); and map them to the VM's
 * time by a line all threads share: an epoch starts at ticks `at` with VM
 * time `vm_at` and rises by `mult` ns per tick (32.32 fixed point) for
 * `span` ticks (KS_EPOCH_NS of VM time). A thread keeps a copy of the
 * epoch; past its end it takes the clock's newest, or makes the next one
 * under the clock's lock: from the VM's time now and the rate of ticks
 * measured since the last epoch began.
 *
 * Why one line for every thread: the sink merges the threads' rings by
 * these times (port/ring/ring_drain.c), so an event written on one
 * scheduler before an event on another (a process that moved between them)
 * must not get a later time. That holds because the mapping is one
 * function of the ticks, continuous and rising: an epoch starts no earlier
 * than where the one before it ended (and a tick read before an epoch began
 * maps to that epoch's start at most), and its slope leans towards the VM's
 * clock so that the line meets it at the epoch's end. The error left: erts'
 * time correction changes the VM clock's rate by at most ~1 %, so under
 * 0.1 ms over an epoch, back within three epochs of a change in its rate
 * (test_vm_clock); durations are off by the rate
 * error alone (~1e-5 with 10 ms epochs).
 *
 * The counter is read in order with what came before it, as the kernel's
 * own clock reads it (rdtsc_ordered): RDTSCP, which waits for every earlier
 * instruction and load, or, on a CPU without it, MFENCE and LFENCE before
 * RDTSC. A bare RDTSC may run ahead of the loads before it: on a thread that
 * just took over a process (the run queue's lock taken, the other thread's
 * release seen), it could read the counter from before that thread's last
 * record, and the process's next record got an earlier time than its last
 * one, by 11 ns in test_ring's writers on threads (1 run in 130 under load),
 * and the sink's merge by time put the two in the wrong order.
 *
 * Until the first KS_CALIBRATE_NS after ks_vm_clock_init there is no rate:
 * every reading takes the VM's time itself, under the lock, never below the
 * last one handed out.
 */
#ifndef KS_VM_CLOCK_H
#define KS_VM_CLOCK_H

#include <fcntl.h>
#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KS_EPOCH_NS 10000000         /* an epoch's length in VM time */
#define KS_CALIBRATE_NS 1000000      /* VM time before the first rate is measured */

typedef struct ks_vm_epoch {
  uint64_t at, span, mult;           /* span 0: none */
  int64_t vm_at;
} ks_vm_epoch;

typedef struct ks_vm_clock {
  pthread_mutex_t lock;
  ks_vm_epoch now;                   /* the newest epoch (under the lock) */
  int64_t (*vm_time)(void);          /* the VM's monotonic time in ns */
  int use_tsc;                       /* KS_TICKS_OS, KS_TICKS_RDTSCP or KS_TICKS_FENCED */
  uint64_t sample_ticks;             /* ticks and VM time when the last epoch began */
  int64_t sample_vm;
  uint64_t rate;                     /* VM ns per tick, 32.32; 0: not measured yet */
  int64_t last;                      /* the latest time handed out before there was a rate */
} ks_vm_clock;

/* What the ticks are: the OS's monotonic clock, or the time stamp counter
 * read by RDTSCP, or by RDTSC behind MFENCE and LFENCE. */
#define KS_TICKS_OS 0
#define KS_TICKS_RDTSCP 1
#define KS_TICKS_FENCED 2

#if defined(__x86_64__)
static inline uint64_t ks_tsc(int how) {
  uint32_t lo, hi, aux;

  if (how == KS_TICKS_RDTSCP)
    __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
  else
    __asm__ volatile("mfence\n\tlfence\n\trdtsc" : "=a"(lo), "=d"(hi) : : "memory");
  return (uint64_t)hi << 32 | lo;
}
#else
static inline uint64_t ks_tsc(int how) {
  return 0;
}
#endif

static inline uint64_t ks_os_ns(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ks_vm_ticks(const ks_vm_clock *c) {
  return c->use_tsc != KS_TICKS_OS ? ks_tsc(c->use_tsc) : ks_os_ns();
}

/* The ticks the clock reads: a test may define its own counter before including this. */
#ifndef KS_VM_TICKS
#define KS_VM_TICKS(c) ks_vm_ticks(c)
#endif

/* The ticks to read: the TSC when it is the kernel's clocksource (x86-64
 * only), by RDTSCP when the CPU has it (CPUID 0x80000001, EDX bit 27), else
 * fenced; else the OS's clock (KS_TICKS_OS). */
static inline int ks_tsc_is_clocksource(void) {
#if defined(__x86_64__)
  char buf[32] = {0};
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY);
  unsigned a, b, c, d;
  ssize_t n;

  if (fd < 0)
    return KS_TICKS_OS;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (!(n >= 3 && strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n')))
    return KS_TICKS_OS;
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d) && (d & (1u << 27)))
    return KS_TICKS_RDTSCP;
  return KS_TICKS_FENCED;
#else
  return KS_TICKS_OS;
#endif
}

/* use_tsc: what ks_tsc_is_clocksource said (KS_TICKS_OS: the OS's clock). */
static inline void ks_vm_clock_init(ks_vm_clock *c, int64_t (*vm_time)(void), int use_tsc) {
  pthread_mutex_init(&c->lock, NULL);
  c->now = (ks_vm_epoch){0, 0, 0, 0};
  c->vm_time = vm_time;
  c->use_tsc = use_tsc;
  c->sample_ticks = KS_VM_TICKS(c);
  c->sample_vm = vm_time();
  c->rate = 0;
  c->last = INT64_MIN;
}

static inline int64_t ks_vm_epoch_time(const ks_vm_epoch *e, uint64_t ticks) {
  return ticks < e->at ? e->vm_at : e->vm_at + (int64_t)(((ticks - e->at) * e->mult) >> 32);
}

/* The next epoch, from ticks and the VM's time v now (under the lock); 0 if no rate yet. */
static inline int ks_vm_clock_next(ks_vm_clock *c, uint64_t ticks, int64_t v) {
  ks_vm_epoch *e = &c->now;
  int64_t start = c->last > v ? c->last : v, aim;
  uint64_t rate = c->rate, span, mult;

  if (ticks > c->sample_ticks && v - c->sample_vm >= KS_CALIBRATE_NS)
    rate = (uint64_t)(((unsigned __int128)(uint64_t)(v - c->sample_vm) << 32) /
                      (ticks - c->sample_ticks));
  if (rate == 0)
    return 0;
  if (e->span != 0 && ks_vm_epoch_time(e, e->at + e->span) > start)
    start = ks_vm_epoch_time(e, e->at + e->span);   /* never earlier than the last one ended */
  span = ((uint64_t)KS_EPOCH_NS << 32) / rate;
  if (span == 0)
    span = 1;
  /* Meet the VM's clock at the epoch's end, within half to twice the rate. */
  aim = v + KS_EPOCH_NS - start;
  if (aim < KS_EPOCH_NS / 2)
    aim = KS_EPOCH_NS / 2;
  if (aim > 2 * KS_EPOCH_NS)
    aim = 2 * KS_EPOCH_NS;
  mult = ((uint64_t)aim << 32) / span;
  *e = (ks_vm_epoch){ticks, span, mult, start};
  c->rate = rate;
  c->sample_ticks = ticks;
  c->sample_vm = v;
  return 1;
}

/* Past the thread's copy of the epoch: the newest epoch, or a new one, or the VM's time. */
static inline int64_t ks_vm_clock_slow(ks_vm_clock *c, ks_vm_epoch *mine, uint64_t ticks) {
  int64_t t;

  pthread_mutex_lock(&c->lock);
  if (c->now.span != 0 && ticks - c->now.at < c->now.span) {
    *mine = c->now;
    t = ks_vm_epoch_time(mine, ticks);
  } else if (c->now.span != 0 && ticks < c->now.at) {
    t = c->now.vm_at;   /* read before the newest epoch began: at most its start */
  } else {
    uint64_t fresh = KS_VM_TICKS(c);
    int64_t v = c->vm_time();
    if (ks_vm_clock_next(c, fresh, v)) {
      *mine = c->now;
      t = c->now.vm_at;
    } else {
      t = c->last = c->last > v ? c->last : v;
    }
  }
  pthread_mutex_unlock(&c->lock);
  return t;
}

/* The VM's time now, in ns, through the thread's copy of the epoch (zeroed at first). */
static inline int64_t ks_vm_clock_now(ks_vm_clock *c, ks_vm_epoch *mine) {
  uint64_t ticks = KS_VM_TICKS(c), d = ticks - mine->at;

  if (d < mine->span)
    return mine->vm_at + (int64_t)((d * mine->mult) >> 32);
  return ks_vm_clock_slow(c, mine, ticks);
}

#endif
