/* The dispatch floor of an erl_tracer NIF (make bench-overhead): enabled/3
 * answers `trace' and trace/5 answers `ok', nothing else. What an event costs
 * the traced process through this tracer is what the VM itself spends to hand
 * a NIF tracer one event (the checks, the trace term and the options map, two
 * NIF calls); bench/overhead_bench.erl sets the kprof_tracer NIF's ring beside
 * it. Built into _build/bench by bench/bench.mk, never shipped in erlang/priv.
 *
 * thread_cpu_ns/0: the CPU time of the scheduler thread that calls it (the
 * bench binds its worker to one scheduler and reads it before and after the
 * loop: the time the traced process took, not the time other work on a busy
 * machine took the core from it). */
#include <time.h>

#include <erl_nif.h>

static ERL_NIF_TERM am_trace, am_ok;

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
  am_trace = enif_make_atom(env, "trace");
  am_ok = enif_make_atom(env, "ok");
  return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old, ERL_NIF_TERM info) {
  return load(env, priv, info);
}

static ERL_NIF_TERM nif_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  return am_trace;
}

static ERL_NIF_TERM nif_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  return am_ok;
}

static ERL_NIF_TERM nif_thread_cpu_ns(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  struct timespec t;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return enif_make_int64(env, (ErlNifSInt64)t.tv_sec * 1000000000 + t.tv_nsec);
}

static ErlNifFunc funcs[] = {
    {"enabled", 3, nif_enabled, 0},
    {"trace", 5, nif_trace, 0},
    {"thread_cpu_ns", 0, nif_thread_cpu_ns, 0},
};

ERL_NIF_INIT(null_tracer, funcs, load, NULL, upgrade, NULL)
