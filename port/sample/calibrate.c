/* calibrate.c: where the pid of the running process is, found from the
 * samples of beacon processes whose pids are known (ks_sample.h).
 *
 * A JIT sample's r13 points to the process it ran. For each of its first
 * KS_CAL_WORDS words and each shift, the word is taken for a pid (the VM's
 * immediate-pid tag in its low 4 bits, the number at the shift, the serial
 * above) and compared with each beacon's pid: a match is a vote for that
 * (offset, shift) from that beacon. The layout is the one that every beacon
 * votes for at least `min' times: a word of the process struct that holds
 * each beacon's own pid, however many processes ran meanwhile.
 */
#include "ks_sample.h"

#define PID_TAG_MASK 0xfu
#define PID_TAG 0x3u

void ks_calib_sample(ks_calib *c, const ks_playout *lay, const uint64_t *words, const uint8_t *ok) {
  uint64_t nmask = (1ull << lay->num_bits) - 1;
  uint64_t smask = lay->ser_bits >= 64 ? UINT64_MAX : (1ull << lay->ser_bits) - 1;
  uint32_t k, s, b;

  c->samples++;
  for (k = 0; k < KS_CAL_WORDS; k++) {
    uint64_t w = words[k];
    if (!ok[k] || (w & PID_TAG_MASK) != PID_TAG)
      continue;
    for (s = 4; s < KS_CAL_SHIFTS; s++) {
      uint64_t num = (w >> s) & nmask;
      uint64_t ser = s + lay->num_bits < 64 ? (w >> (s + lay->num_bits)) & smask : 0;
      for (b = 0; b < c->nbeacons; b++)
        if (num == c->num[b] && ser == c->ser[b] && c->votes[b][k][s] < UINT32_MAX)
          c->votes[b][k][s]++;
    }
  }
}

int ks_calib_result(const ks_calib *c, uint32_t min, ks_playout *lay) {
  uint32_t k, s, b;

  if (c->nbeacons == 0)
    return KS_EINVAL;
  for (k = 0; k < KS_CAL_WORDS; k++)
    for (s = 4; s < KS_CAL_SHIFTS; s++) {
      for (b = 0; b < c->nbeacons && c->votes[b][k][s] >= min; b++)
        ;
      if (b == c->nbeacons) {
        lay->offset = k * 8;
        lay->shift = s;
        lay->known = 1;
        return KS_OK;
      }
    }
  return KS_EINVAL;
}
