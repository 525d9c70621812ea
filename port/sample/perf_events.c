/* perf_events.c: a sampling event and its ring on every scheduler thread of
 * the VM (ks_perf.h), kept up to date as threads come and go.
 *
 * One software cpu-clock event per thread (perf_event_open(attr, tid, -1)):
 * a sample every period of the thread's CPU time, user space only, the time
 * on CLOCK_MONOTONIC. Nothing waits on the events: the sink drains the
 * rings from a timer, so they are set never to wake anyone.
 *
 * The rings are locked memory. An unprivileged user may lock
 * kernel.perf_event_mlock_kb per CPU for all its perf rings, then up to
 * RLIMIT_MEMLOCK more; CAP_IPC_LOCK lifts both. A ring gets the pages it
 * wants (about 0.1 s of samples at the rate asked) when the budget allows,
 * else fewer (down to one data page); a thread no ring fits is counted
 * (unmapped) and not sampled. What a full ring loses, the kernel counts
 * (PERF_RECORD_LOST), and so does the sampler.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ks_perf.h"

#if KS_PERF_EVENTS
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#endif

int ks_thread_kind(const char *comm) {
  if (strstr(comm, "dirty_cpu") != NULL || strncmp(comm, "erts_dcpus", 10) == 0)
    return KS_THR_DIRTY_CPU;
  if (strstr(comm, "dirty_io") != NULL || strncmp(comm, "erts_dios", 9) == 0)
    return KS_THR_DIRTY_IO;
  if (strstr(comm, "_scheduler") != NULL || strncmp(comm, "erts_sched", 10) == 0)
    return KS_THR_SCHED;
  return -1;
}

void ks_pevents_free(ks_pevents *pe) {
  uint32_t k;

  for (k = 0; k < pe->n; k++) {
#if KS_PERF_EVENTS
    if (pe->v[k].map != NULL)
      munmap(pe->v[k].map, pe->v[k].map_len);
#endif
    if (pe->v[k].fd >= 0)
      close(pe->v[k].fd);
    ks_pring_free(&pe->v[k].ring);
  }
  free(pe->v);
  memset(pe, 0, sizeof(*pe));
}

#if !KS_PERF_EVENTS

int ks_pevents_start(ks_pevents *pe, int ospid, uint32_t hz) {
  memset(pe, 0, sizeof(*pe));
  return KS_PERF_ENOTSUP;
}

int ks_pevents_rescan(ks_pevents *pe) {
  return KS_PERF_ENOTSUP;
}

void ks_pevents_disable(ks_pevents *pe) {
}

#else

/* A small number from a file of /proc (-1 when unreadable). */
static long long read_number(const char *path) {
  char buf[32];
  long long v = -1;
  ssize_t k;
  int fd = open(path, O_RDONLY | O_CLOEXEC);

  if (fd < 0)
    return -1;
  k = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (k > 0) {
    buf[k] = 0;
    v = strtoll(buf, NULL, 10);
  }
  return v;
}

/* Pages all our rings may lock: the user's perf allowance and RLIMIT_MEMLOCK
 * (see the top of the file); UINT64_MAX where nothing limits (root). */
static uint64_t lock_budget(void) {
  long long kb = read_number("/proc/sys/kernel/perf_event_mlock_kb");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN), page = sysconf(_SC_PAGESIZE);
  struct rlimit rl;
  uint64_t pages;

  if (geteuid() == 0)
    return UINT64_MAX;   /* CAP_IPC_LOCK: the locks are not counted */
  pages = kb > 0 && cpus > 0 && page > 0 ? (uint64_t)kb * 1024 * (uint64_t)cpus / (uint64_t)page : 0;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && page > 0)
    pages += rl.rlim_cur / (uint64_t)page;
  else if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
    return UINT64_MAX;
  return pages;
}

static int open_event(const ks_pevents *pe, int tid) {
  struct perf_event_attr a;

  memset(&a, 0, sizeof(a));
  a.size = sizeof(a);
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_CPU_CLOCK;
  a.sample_period = pe->period_ns;
  a.sample_type = KS_PERF_REGS_MASK != 0 ? KS_PERF_SAMPLE_TYPE
                                         : KS_PERF_SAMPLE_TYPE & ~KS_PERF_SAMPLE_REGS_USER;
  a.sample_regs_user = KS_PERF_REGS_MASK;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.exclude_callchain_kernel = 1;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;
  a.sample_max_stack = (uint16_t)pe->max_stack;
  a.watermark = 1;
  a.wakeup_watermark = UINT32_MAX;   /* nobody polls the events */
  return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Maps ev's ring: the pages wanted, fewer when the lock budget says so or
 * the kernel refuses (EPERM: over the limit), down to one data page. */
static int map_ring(ks_pevents *pe, ks_pevent *ev) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t pages = pe->want_pages;
  struct perf_event_mmap_page *meta;
  void *p;

  while (pages > 1 && pe->budget_pages != UINT64_MAX && pages + 1 > pe->budget_pages)
    pages /= 2;
  for (;; pages /= 2) {
    p = mmap(NULL, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_SHARED, ev->fd, 0);
    if (p != MAP_FAILED)
      break;
    pe->err = errno;
    if (pages == 1 || (errno != EPERM && errno != ENOMEM))
      return KS_PERF_EMLOCK;
  }
  ev->map = p;
  ev->map_len = (pages + 1) * page;
  meta = p;
  ev->ring.head = (volatile uint64_t *)((char *)p + offsetof(struct perf_event_mmap_page, data_head));
  ev->ring.tail = (volatile uint64_t *)((char *)p + offsetof(struct perf_event_mmap_page, data_tail));
  ev->ring.data = (unsigned char *)p + (meta->data_offset ? meta->data_offset : page);
  ev->ring.size = pages * page;
  if (pe->budget_pages != UINT64_MAX)
    pe->budget_pages -= pages + 1 < pe->budget_pages ? pages + 1 : pe->budget_pages;
  pe->ring_bytes += ev->ring.size;
  return KS_OK;
}

/* Thread tid (of kind) sampled from now: KS_OK, or -errno. */
static int add_thread(ks_pevents *pe, int tid, int kind) {
  ks_pevent *ev;
  int fd = open_event(pe, tid), rc;

  if (fd < 0)
    return -(pe->err = errno);
  if (ks_grow(&pe->v, &pe->cap, pe->n, 16, sizeof(*pe->v)) != KS_OK) {
    close(fd);
    return KS_ENOMEM;
  }
  ev = &pe->v[pe->n];
  memset(ev, 0, sizeof(*ev));
  ev->tid = tid;
  ev->kind = kind;
  ev->fd = fd;
  ev->seen = 1;
  if ((rc = map_ring(pe, ev)) != KS_OK) {
    close(fd);
    pe->unmapped++;
    return rc;
  }
  if (pe->enabled)
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  pe->n++;
  pe->opened++;
  return KS_OK;
}

static ks_pevent *find(ks_pevents *pe, int tid) {
  uint32_t k;

  for (k = 0; k < pe->n; k++)
    if (pe->v[k].tid == tid)
      return &pe->v[k];
  return NULL;
}

/* The kind of thread tid of the VM by its name, -1 when not sampled or gone. */
static int kind_of(int ospid, int tid) {
  char path[96], comm[32];
  ssize_t k;
  int fd;

  snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", ospid, tid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return -1;
  k = read(fd, comm, sizeof(comm) - 1);
  close(fd);
  if (k <= 0)
    return -1;
  comm[k] = 0;
  comm[strcspn(comm, "\n")] = 0;
  return ks_thread_kind(comm);
}

/* The first refusal of the scan in *first (0: none). */
static int scan(ks_pevents *pe, int *first) {
  char path[64];
  struct dirent *d;
  ks_pevent *ev;
  DIR *dir;
  int tid, kind, rc;

  snprintf(path, sizeof(path), "/proc/%d/task", pe->ospid);
  if ((dir = opendir(path)) == NULL)
    return -errno;
  while ((d = readdir(dir)) != NULL) {
    if ((tid = atoi(d->d_name)) <= 0)
      continue;
    if ((ev = find(pe, tid)) != NULL) {
      ev->seen = 1;
      continue;
    }
    if ((kind = kind_of(pe->ospid, tid)) < 0)
      continue;
    if ((rc = add_thread(pe, tid, kind)) != KS_OK && *first == 0 && rc != -ESRCH)
      *first = rc;
  }
  closedir(dir);
  return KS_OK;
}

int ks_pevents_start(ks_pevents *pe, int ospid, uint32_t hz) {
  long long stack = read_number("/proc/sys/kernel/perf_event_max_stack");
  uint64_t bytes;
  int first = 0, rc;

  memset(pe, 0, sizeof(*pe));
  pe->ospid = ospid;
  pe->period_ns = 1000000000ull / (hz > 0 ? hz : 1);
  pe->max_stack = stack > 0 && stack < 65535 ? (uint32_t)stack : 127;
  /* About 0.1 s of samples of ~1 KiB (a deep chain), a power of two of pages. */
  bytes = (uint64_t)hz * 1024 / 10;
  for (pe->want_pages = 2; pe->want_pages < 64 && (uint64_t)pe->want_pages * 4096 < bytes;)
    pe->want_pages *= 2;
  pe->budget_pages = lock_budget();
  pe->enabled = 1;
  if ((rc = scan(pe, &first)) != KS_OK)
    return rc;
  if (pe->n == 0)
    return first != 0 ? first : -ESRCH;
  return KS_OK;
}

int ks_pevents_rescan(ks_pevents *pe) {
  uint32_t k, kept = 0;
  int first = 0, rc;

  for (k = 0; k < pe->n; k++)
    pe->v[k].seen = 0;
  if ((rc = scan(pe, &first)) != KS_OK)
    return rc;
  for (k = 0; k < pe->n; k++) {
    ks_pevent *ev = &pe->v[k];
    if (!ev->seen) {   /* the thread is gone: its ring was drained */
      munmap(ev->map, ev->map_len);
      close(ev->fd);
      pe->ring_bytes -= ev->ring.size;
      ks_pring_free(&ev->ring);
      pe->closed++;
      continue;
    }
    pe->v[kept++] = *ev;
  }
  pe->n = kept;
  return KS_OK;
}

void ks_pevents_disable(ks_pevents *pe) {
  uint32_t k;

  for (k = 0; k < pe->n; k++)
    ioctl(pe->v[k].fd, PERF_EVENT_IOC_DISABLE, 0);
  pe->enabled = 0;
}

#endif
