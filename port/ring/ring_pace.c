/* ring_pace.c: how long the sink waits before it drains the rings again.
 *
 * A drain costs the sink a wake-up and a look at every ring, and the VM's
 * schedulers the cache lines the sink then touches: draining every
 * millisecond costs a service at thousands of requests a second more than
 * the events themselves (bench/RESULTS.md, "Tiers"). Drains are paced
 * instead: the longest wait, up to a bound, after which no ring can have
 * filled past half, and within a quarter of the guard's lag bound.
 *
 * A ring fills at most at the writers' peak rate, a record of 48 bytes every
 * ~400 ns (bench-overhead's floor): KS_RING_PEAK_BYTES_PER_MS rounds that
 * up. Half a ring at that rate is the wait for a ring idle so far that
 * starts a burst now: 64 KiB rings are drained every millisecond, as
 * before, 1 MiB ones every 4 ms, the default 32 MiB ones at the bound. A
 * ring that filled faster than the peak since the last drain (a faster
 * machine) shortens the wait in proportion. Commands drain the rings first
 * (sink.c), so no answer waits for the pace.
 */
#include "ks_ring_reader.h"

#define KS_RING_PEAK_BYTES_PER_MS (128u * 1024u)

unsigned ks_ring_pace(int64_t interval_ns, uint64_t fullest, uint64_t size, int64_t max_lag_ns,
                      unsigned max_ms) {
  uint64_t wait = size / 2 / KS_RING_PEAK_BYTES_PER_MS;

  /* The fullest ring's own rate: half a ring at it. */
  if (interval_ns > 0 && fullest > 0) {
    uint64_t at_rate = (uint64_t)((long double)size / 2 * (long double)interval_ns /
                                  (long double)fullest / 1e6L);
    if (at_rate < wait)
      wait = at_rate;
  }
  if (max_lag_ns > 0 && (uint64_t)(max_lag_ns / 4000000) < wait)
    wait = (uint64_t)(max_lag_ns / 4000000);
  if (wait > max_ms)
    wait = max_ms;
  return wait < 1 ? 1 : (unsigned)wait;
}
