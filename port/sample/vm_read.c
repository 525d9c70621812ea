/* vm_read.c: reading the VM's memory (ks_perf.h): the pid of the process a
 * sample's r13 points to, read while that process most likely still runs.
 *
 * One process_vm_readv reads up to IOV_MAX words; it stops at the first
 * address that is not mapped, so the words after that one are read again,
 * one call each until the next that succeeds. Reading another process's
 * memory needs the right to trace it (same user, and ptrace_scope allowing
 * it: the kernel's PTRACE_MODE_ATTACH_REALCREDS check, as for perf).
 */
#include <errno.h>

#include "ks_perf.h"

#if KS_PERF_EVENTS
#include <sys/uio.h>
#endif

#define BATCH 512

int ks_pid_word_decode(uint64_t word, uint32_t num_bits, uint32_t *num, uint32_t *serial) {
  uint64_t data = word >> 4;

  if ((word & 0xf) != 0x3 || num_bits == 0 || num_bits > 32)
    return KS_EINVAL;
  *num = (uint32_t)(data & ((1ull << num_bits) - 1));
  data >>= num_bits;
  if (data > UINT32_MAX || (num_bits == 15 && data >= (1u << 13)))
    return KS_EINVAL;   /* OTP 25's pids have 28 bits of data in all */
  *serial = (uint32_t)data;
  return KS_OK;
}

uint64_t ks_pid_word_make(uint32_t num, uint32_t serial, uint32_t num_bits) {
  return ((uint64_t)serial << num_bits | num) << 4 | 0x3;
}

#if !KS_PERF_EVENTS

int ks_vm_read_words(int ospid, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  memset(ok, 0, n);
  return KS_PERF_ENOTSUP;
}

#else

/* Words [from, to) in one call: how many were read before the first that was not. */
static int batch(int ospid, const uint64_t *addrs, uint32_t from, uint32_t to, uint64_t *out) {
  struct iovec local[BATCH], remote[BATCH];
  uint32_t k;
  ssize_t got;

  for (k = from; k < to; k++) {
    local[k - from].iov_base = &out[k];
    local[k - from].iov_len = 8;
    remote[k - from].iov_base = (void *)(uintptr_t)addrs[k];
    remote[k - from].iov_len = 8;
  }
  got = process_vm_readv(ospid, local, to - from, remote, to - from, 0);
  return got < 0 ? -errno : (int)(got / 8);
}

int ks_vm_read_words(int ospid, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  uint32_t at = 0, read = 0;
  int got, err = 0;

  memset(ok, 0, n);
  while (at < n) {
    uint32_t to = n - at > BATCH ? at + BATCH : n;
    got = batch(ospid, addrs, at, to, out);
    if (got < 0) {
      err = got;
      if (got == -EPERM || got == -ESRCH || got == -ENOSYS)
        break;   /* none will be read */
      at++;      /* this word's address is not mapped: on past it */
      continue;
    }
    memset(ok + at, 1, (size_t)got);
    read += (uint32_t)got;
    at += (uint32_t)got;
    if (at < to)
      at++;      /* the word that stopped the call */
  }
  return read > 0 || err == 0 ? (int)read : err;
}

#endif
