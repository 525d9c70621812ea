/* meta.c: Base.meta.json, what the folded files cannot say (doc/flame.md, "The
 * formats").
 *
 * A folded file holds only `frame;frame;... count' lines: every reader of the
 * format (flamegraph.pl, difffolded.pl, inferno, speedscope) takes any other
 * line for a bad one. So the capture's identity and its correction go into a
 * small JSON object beside it, written with the folded files (files.c):
 *
 *   {"kprof":"0.1.0","id":Id,"processes":N,"total_us":N,
 *    "formats":["folded",...],"units":{"folded":"us",...},
 *    "correction":{"applied":true,"per_event_ns":N,"events":N,"call_ns":N,
 *                  "call_from":"capture","return_ns":N,"return_from":"calibration",
 *                  "calibration_ns":N,"subtracted_ms":X,"clamped":N,"clamped_ms":X,
 *                  "text":"kprof correction: ..."}}
 *
 * With no correction, "correction" is {"applied":false,"text":...}, and
 * {"applied":false,"skipped_per_event_ns":N,"text":...} when the capture's
 * whole time was less than its events' cost. "text" is the line the other
 * formats carry (perf's comment, speedscope's name, callgrind's desc:, the
 * SVG's subtitle). Every figure comes from the graph: a replay writes the same
 * bytes as the capture it replays.
 */
#include "ks_write.h"

static void put_correction(const ks_callpath *g, FILE *f) {
  static const char *const from[] = {"calibration", "capture"};
  const ks_fcounters *k = &g->k;
  char text[2048];
  size_t n = ks_callpath_correction_text(g, text, sizeof(text));

  if (g->o.correct_ns == 0) {
    fputs("{\"applied\":false,", f);
    if (k->skipped_ns > 0)
      fprintf(f, "\"skipped_per_event_ns\":%llu,", (unsigned long long)k->skipped_ns);
  } else {
    fprintf(f,
            "{\"applied\":true,\"per_event_ns\":%llu,\"events\":%llu,\"call_ns\":%llu,"
            "\"call_from\":\"%s\",\"return_ns\":%llu,\"return_from\":\"%s\","
            "\"calibration_ns\":%u,\"subtracted_ms\":%.3f,\"clamped\":%llu,"
            "\"clamped_ms\":%.3f,",
            (unsigned long long)ks_callpath_per_event_ns(g), (unsigned long long)k->corrected,
            (unsigned long long)k->cost_ns[0], from[k->cost_measured[0] != 0],
            (unsigned long long)k->cost_ns[1], from[k->cost_measured[1] != 0],
            g->o.correct_ns, (double)k->subtracted_ns / 1e6, (unsigned long long)k->clamped,
            (double)k->clamped_ns / 1e6);
  }
  fputs("\"text\":", f);
  ks_write_put_json(f, text, n);
  putc('}', f);
}

int ks_write_meta(const ks_fout *o, FILE *f) {
  const char *sep = "";
  int k;

  fprintf(f, "{\"kprof\":\"" KS_VERSION "\",\"id\":%lld,\"processes\":%llu,\"total_us\":%llu,",
          (long long)o->g->id, (unsigned long long)o->processes,
          (unsigned long long)((o->grand + 500) / 1000));
  fputs("\"formats\":[", f);
  for (k = 0; k < KS_NFORMATS; k++)
    if (o->fmts & (1 << k)) {
      fprintf(f, "%s\"%s\"", sep, ks_write_format_name(1 << k));
      sep = ",";
    }
  /* What a folded file's counts are: self time, or calls (folded.c). */
  fputs("],\"units\":{", f);
  sep = "";
  if (o->fmts & KS_FMT_folded) {
    fputs("\"folded\":\"us\"", f);
    sep = ",";
  }
  if (o->fmts & KS_FMT_folded_calls)
    fprintf(f, "%s\"folded_calls\":\"calls\"", sep);
  fputs("},\"correction\":", f);
  put_correction(o->g, f);
  fputs("}\n", f);
  return ferror(f) ? KS_EINVAL : KS_OK;
}
