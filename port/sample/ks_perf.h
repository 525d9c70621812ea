/* ks_perf.h: the kernel's side of sampling: perf_event records, the mmap ring
 * they arrive in, and one sampling event per thread of the VM.
 *
 * The sampler (ks_sample.h) opens a software cpu-clock event on every
 * scheduler thread of the VM (normal, dirty CPU, dirty I/O), user space
 * only, each sample carrying
 *
 *   IP | TID | TIME | CALLCHAIN | REGS_USER
 *
 * (the time on CLOCK_MONOTONIC; of the registers r13 alone: in JIT code it
 * holds the running process). The kernel writes each sample as a
 * record into the event's ring, a metadata page and 2^n data pages mapped
 * read-write; the sink drains it (perf_ring.c) and decodes each record
 * (perf_decode.c). The decoder reads only the bytes it is given, so it
 * runs on recorded streams and fuzzed bytes as on a live ring.
 *
 * Where perf_event_open is missing (not Linux, no <linux/perf_event.h>,
 * the KS_PORTABLE build) KS_PERF_EVENTS is 0 and ks_pevents_start answers
 * KS_PERF_ENOTSUP; the decoder and the ring reader are plain C either way.
 */
#ifndef KS_PERF_H
#define KS_PERF_H

#include "core/ks.h"

#if defined(__linux__) && !defined(KS_PORTABLE) && defined(__has_include)
#if __has_include(<linux/perf_event.h>)
#define KS_PERF_EVENTS 1
#endif
#endif
#ifndef KS_PERF_EVENTS
#define KS_PERF_EVENTS 0
#endif

/* The record types and sample fields the sampler uses (the kernel's ABI,
 * linux/perf_event.h; written out so that the decoder builds anywhere). */
enum {
  KS_PERF_RECORD_LOST = 2,
  KS_PERF_RECORD_THROTTLE = 5,
  KS_PERF_RECORD_UNTHROTTLE = 6,
  KS_PERF_RECORD_SAMPLE = 9,
  KS_PERF_RECORD_LOST_SAMPLES = 13
};
enum {
  KS_PERF_SAMPLE_IP = 1u << 0,
  KS_PERF_SAMPLE_TID = 1u << 1,
  KS_PERF_SAMPLE_TIME = 1u << 2,
  KS_PERF_SAMPLE_CALLCHAIN = 1u << 5,
  KS_PERF_SAMPLE_REGS_USER = 1u << 12
};
/* What the sampler asks for: the decoder takes exactly this layout. */
#define KS_PERF_SAMPLE_TYPE                                                              \
  (KS_PERF_SAMPLE_IP | KS_PERF_SAMPLE_TID | KS_PERF_SAMPLE_TIME | KS_PERF_SAMPLE_CALLCHAIN | \
   KS_PERF_SAMPLE_REGS_USER)
/* Callchain entries at or above this are context markers (PERF_CONTEXT_USER, ...). */
#define KS_PERF_CONTEXT_MAX ((uint64_t)-4095)

/* The user register sampled: r13 (bit 21 in x86-64's numbering,
 * asm/perf_regs.h), where the JIT keeps the running process (c_p). Other
 * architectures ask for none: their samples name no process. */
#if defined(__x86_64__)
#define KS_PERF_REGS_MASK (1ull << 21)
#define KS_NREGS 1
#else
#define KS_PERF_REGS_MASK 0ull
#define KS_NREGS 0
#endif

/* Frames of one callchain kept at most (the kernel's own cap,
 * kernel.perf_event_max_stack, is 127 by default). */
#define KS_PERF_MAX_CHAIN 1024

/* One sample as decoded: its callchain's user frames (markers left out),
 * innermost first; ips[0] is the sampled IP. */
typedef struct ks_psample {
  uint64_t ip, time;
  uint32_t pid, tid;
  uint32_t nips;               /* frames in ips */
  uint32_t chain_nr;           /* callchain entries as the kernel wrote them (markers too) */
  uint64_t ips[KS_PERF_MAX_CHAIN];
  uint64_t abi;                /* PERF_SAMPLE_REGS_ABI_*: 0 when no registers were taken */
  uint64_t r13;                /* valid when abi != 0 */
} ks_psample;

/* A record's header, as the kernel writes it. */
typedef struct ks_perf_header {
  uint32_t type;
  uint16_t misc, size;
} ks_perf_header;

/* perf_decode.c. The header of the record at p (n bytes there at least 8):
 * KS_OK, or KS_EBADTERM when its size is below 8, not a multiple of 8, or
 * past n. */
int ks_perf_header_read(const unsigned char *p, size_t n, ks_perf_header *h);
/* A PERF_RECORD_SAMPLE (the record, header included, len bytes) laid out as
 * KS_PERF_SAMPLE_TYPE with nregs registers (0, or 1: r13; KS_NREGS as the
 * sampler asks): KS_OK, or KS_EBADTERM for a record that does not hold what its
 * fields say. Frames past KS_PERF_MAX_CHAIN are left out (chain_nr says). */
int ks_perf_decode_sample(const unsigned char *p, size_t len, uint32_t nregs, ks_psample *s);
/* The count of a PERF_RECORD_LOST (id, lost) or _LOST_SAMPLES (lost): KS_OK
 * and *lost, or KS_EBADTERM. */
int ks_perf_decode_lost(const unsigned char *p, size_t len, uint64_t *lost);

/* perf_ring.c: the reader's view of one event's ring. head and tail point at
 * the metadata page's data_head and data_tail (or anything laid out alike:
 * the tests' rings are plain memory); data is the 2^n bytes of data pages. */
typedef struct ks_pring {
  volatile uint64_t *head, *tail;
  unsigned char *data;
  uint64_t size;               /* a power of two */
  unsigned char *scratch;      /* a record that wraps the end, copied whole */
  size_t scratch_cap;
  uint64_t bad;                /* records that could not be read: the rest of the ring skipped */
} ks_pring;

/* Called with each whole record, header included, 8-byte aligned. */
typedef void (*ks_precord_fn)(void *ctx, const unsigned char *rec, size_t len);
/* Hands every record written since the last drain to fn, then gives the
 * space back to the kernel; returns the bytes read. A record whose header
 * is impossible ends the drain at the head (counted in bad). */
uint64_t ks_pring_drain(ks_pring *r, ks_precord_fn fn, void *ctx);
void ks_pring_free(ks_pring *r);

/* perf_events.c: the VM's scheduler threads, each with its sampling event
 * and ring. A thread's kind comes from its name (OTP 25: 1_scheduler,
 * 1_dirty_cpu_sch, 1_dirty_io_sche; OTP 26 on: erts_sched_1, erts_dcpus_1,
 * erts_dios_1); other threads (aux, poller, async, a NIF's) are not sampled. */
enum { KS_THR_SCHED = 0, KS_THR_DIRTY_CPU = 1, KS_THR_DIRTY_IO = 2, KS_THR_KINDS = 3 };
/* The kind of a thread named comm, -1 for one that is not sampled. */
int ks_thread_kind(const char *comm);

typedef struct ks_pevent {
  int tid, kind, fd;
  void *map;                   /* the metadata page and the data pages */
  size_t map_len;
  ks_pring ring;
  int seen;                    /* found at the last scan of the threads */
  uint64_t samples, lost;
} ks_pevent;

/* Why no event could be opened or mapped (KS_OK: every thread has one). */
enum { KS_PERF_ENOTSUP = -100, KS_PERF_EMLOCK = -102 };   /* no perf_event_open; no ring fits */

typedef struct ks_pevents {
  int ospid;
  uint64_t period_ns;          /* one sample every period_ns of a thread's CPU time */
  uint32_t max_stack;          /* frames the kernel walks (kernel.perf_event_max_stack) */
  uint32_t want_pages;         /* data pages per ring wanted; fewer where the budget is short */
  uint64_t budget_pages;       /* pages the rings may still lock (mlock limits), UINT64_MAX: none */
  ks_pevent *v;
  uint32_t n, cap;
  uint64_t opened, closed;     /* events opened and closed (threads come and go) */
  uint64_t unmapped;           /* threads left unsampled: no ring could be mapped */
  uint64_t ring_bytes;         /* bytes of the rings mapped now */
  int err;                     /* the last errno of perf_event_open or mmap */
  int enabled;
} ks_pevents;

/* Opens an event on every scheduler thread of the VM (ospid) sampling at hz,
 * enabled at once: KS_OK; -errno of the first refusal when no thread could
 * be sampled (-EACCES, -EPERM: the permissions; -ESRCH: no such process);
 * KS_PERF_ENOTSUP where the system has no perf_event_open. */
int ks_pevents_start(ks_pevents *pe, int ospid, uint32_t hz);
/* Threads that came are sampled from now; those gone are closed (after
 * their ring's last records: the caller drains first). */
int ks_pevents_rescan(ks_pevents *pe);
/* Sampling off (the rings stay to be drained); ks_pevents_free closes all. */
void ks_pevents_disable(ks_pevents *pe);
void ks_pevents_free(ks_pevents *pe);

/* vm_read.c: words of the VM's memory, read now (process_vm_readv, batched):
 * out[k] is the 8 bytes at addrs[k] when ok[k] is set. Returns how many were
 * read; -errno when none could be (-EPERM: not ours to read; KS_PERF_ENOTSUP
 * where the system has no such call). */
int ks_vm_read_words(int ospid, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok);

/* A local pid as the VM keeps it (an immediate term: tag 0x3 in the low 4
 * bits, then the pid's data) into its number and serial: the number is the
 * low num_bits of the data (15 on OTP 25, 28 on OTP 27 and later: the VM
 * says which, see kprof_sample), the serial the bits above. KS_OK, or
 * KS_EINVAL for a word that is no local pid. */
int ks_pid_word_decode(uint64_t word, uint32_t num_bits, uint32_t *num, uint32_t *serial);
uint64_t ks_pid_word_make(uint32_t num, uint32_t serial, uint32_t num_bits);

#endif
