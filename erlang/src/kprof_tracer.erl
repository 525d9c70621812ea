%%% @doc The tracer module kprof traces with: a NIF that writes each trace
%%% event (`call', `return_to', `in'/`out', `spawn'/`spawned'/`exit'/
%%% `register', GC start and end, a meta pattern's `call', `return_from' and
%%% `exception_from') into rings of shared memory that `kprof_sink' reads,
%%% one per scheduler thread (include/ks_ring.h, doc/internals-ring.md),
%%% merged by time in the sink. Tiers and flame
%%% captures use it; {@link kprof_sink:tracer/0} hands out the tracer.
%%%
%%% A port tracer costs the traced process a `term_to_binary' and a port
%%% task per event, and another scheduler a `writev' per event; this one
%%% writes a 48 to 64 byte record with no system call (`make bench-tiers'
%%% shows both side by side). When the NIF cannot load (no priv/
%%% kprof_tracer.so), {@link available/0} says so and kprof uses the
%%% port tracer.
%%%
%%% Used as `erlang:trace(Pids, true, [{tracer, kprof_tracer, Gen} | Flags])'
%%% after {@link attach/2} (or {@link resume/1}) made `Gen' the live
%%% generation, and as a meta tracer with the state `{meta, Gen}'; a tracer
%%% of any other generation removes itself from the process at its next
%%% event. {@link ring_info/0} reads the rings' counters without asking the
%%% sink anything: `kprof_guard' watches the reader with it.
-module(kprof_tracer).

-export([available/0, attach/2, detach/0, resume/1, release/0, live/0, ring_info/0,
         budget/2, budget/0, discard/2, rings/0, rings/1, note_smaller_rings/0, mark/3, mark/4]).
%% erl_tracer callbacks (the NIF)
-export([enabled/3, trace/5]).

-on_load(init/0).

-define(NOT_LOADED, erlang:nif_error({not_loaded, ?MODULE})).

-spec init() -> ok.
init() ->
    Dir = case code:priv_dir(kprof) of
              {error, _} -> filename:join([filename:dirname(code:which(?MODULE)), "..", "priv"]);
              D -> D
          end,
    %% A module without its NIF still loads: available/0 says false.
    _ = erlang:load_nif(filename:join(Dir, "kprof_tracer"), 0),
    ok.

%% @doc Whether the NIF is loaded (else the tiers use the port tracer).
-spec available() -> boolean().
available() ->
    try enabled(trace_status, 0, self()) of
        _ -> true
    catch
        error:{not_loaded, ?MODULE} -> false
    end.

%% @doc The rings to ask the sink for: `{Bytes, Rings}', a ring of `Bytes' for
%% each scheduler thread that may write one (normal, dirty CPU, dirty I/O) and
%% one they share when more threads come (include/ks_ring.h). `Bytes' is the
%% application environment `ring_bytes' as it is (the sink refuses a size that
%% is not a power of two of 64 KiB or more), or by `default' 64 MiB shared
%% among the normal schedulers, a power of two from 1 to 32 MiB: at 2 million
%% events a second a scheduler fills 1 MiB of 48-byte records in 10 ms, and
%% only the pages a busy scheduler's ring goes through take memory.
-spec rings(pos_integer() | default) -> {pos_integer(), pos_integer()}.
rings(Bytes) ->
    Threads = lists:sum([erlang:system_info(K) || K <- [schedulers, dirty_cpu_schedulers,
                                                        dirty_io_schedulers]]),
    {ring_bytes(Bytes), min(Threads + 1, 1024)}.   % KS_RING_MAX_RINGS

%% @doc The rings to ask the sink for now: {@link rings/1} of the application
%% environment `ring_bytes' (`default' when unset).
-spec rings() -> {pos_integer(), pos_integer()}.
rings() ->
    rings(application:get_env(kprof, ring_bytes, default)).

%% @doc Logs a notice when the mapped rings are smaller than {@link rings/0}
%% asks: the sink halves them until they fit half of /dev/shm's free room
%% (port/ring/ring.c), since a writer's fault on a page past the room would
%% end the VM; smaller rings fill sooner (the guard aborts on drops).
-spec note_smaller_rings() -> ok.
note_smaller_rings() ->
    {Asked, _} = rings(),
    case ring_info() of
        #{size := Size, rings := Rings} when Size < Asked ->
            logger:notice("kprof: the tracer's ~b rings are ~ts each, not ~ts: /dev/shm "
                          "has room for no more (a container's is 64 MB unless given "
                          "more, e.g. docker run --shm-size)",
                          [Rings, kprof_alert:bytes(Size), kprof_alert:bytes(Asked)]);
        _ ->
            ok
    end.

ring_bytes(default) ->
    Each = (64 bsl 20) div erlang:system_info(schedulers),
    max(1 bsl 20, min(32 bsl 20, 1 bsl (length(integer_to_list(Each, 2)) - 1)));
ring_bytes(Bytes) ->
    Bytes.

%% @doc Map the ring the sink created under the POSIX shared-memory name
%% `ShmName', and make `Gen' (a positive integer, new for each session) the
%% live tracer state. `ok' or `{error, Reason}'.
-spec attach(binary(), pos_integer()) -> ok | {error, atom()}.
attach(_ShmName, _Gen) ->
    ?NOT_LOADED.

%% @doc No tracer state is live any more: every process traced by this
%% module drops it at its next event, and events are no longer written.
%% The ring stays mapped ({@link resume/1}, {@link ring_info/0}).
-spec detach() -> ok.
detach() ->
    ?NOT_LOADED.

%% @doc Make `Gen' the live state on the ring {@link attach/2} mapped, after
%% a {@link detach/0}; `{error, no_ring}' when there is none or the sink
%% closed it.
-spec resume(pos_integer()) -> ok | {error, no_ring}.
resume(_Gen) ->
    ?NOT_LOADED.

%% @doc Detach and let go of the ring (the sink closed it or is gone).
-spec release() -> ok.
release() ->
    ?NOT_LOADED.

%% @doc The live generation, 0 when none is.
-spec live() -> non_neg_integer().
live() ->
    ?NOT_LOADED.

%% @doc The mapped rings' counters, read from shared memory as they are,
%% summed over the rings: `head' (bytes written by writers), `tail' (bytes
%% the sink has read), `drops' (events lost: a ring was full),
%% `unsupported'; and `reads' (the sink's drains), `size' (each ring's data
%% bytes), `rings', `claimed' (rings a scheduler thread holds), `closed',
%% `live'; or `undefined' when no ring is mapped.
-spec ring_info() -> #{atom() => non_neg_integer()} | undefined.
ring_info() ->
    ?NOT_LOADED.

%% @doc Give generation `Gen' a budget of `N' call records (the `max' of
%% {@link kprof_calls}): each `call' event of that generation takes one
%% before it is written; a call past the budget is not written and is
%% counted as `over' (not as a ring drop: nothing the session asked for was
%% lost). `budget(0, 0)' removes it; a budget is only ever for its own
%% generation, so a new session after a detach has none.
-spec budget(non_neg_integer(), non_neg_integer()) -> ok.
budget(_Gen, _N) ->
    ?NOT_LOADED.

%% @doc The call budget now: its generation (0: none), the calls `left' and
%% the calls that came `over' it.
-spec budget() -> #{gen := non_neg_integer(), left := non_neg_integer(),
                    over := non_neg_integer()}.
budget() ->
    ?NOT_LOADED.

%% @doc Generation `Gen''s events of these tags are discarded before the VM
%% builds them (`enabled/3' answers `discard'): for a mode that reads none of
%% them, e.g. the tiers, which read a process's `exit' of the `procs' flag
%% but not its `spawn', `spawned', `register' or `unregister'. Tags: those a
%% record carries (`in', `out', `spawn', `exit', `gc_minor_start', ...; not
%% `call' or `return_to'), else `badarg'. One generation at a time:
%% `discard(0, [])' clears it, and any other generation discards only the
%% tags no record carries.
-spec discard(non_neg_integer(), [atom()]) -> ok.
discard(_Gen, _Tags) ->
    ?NOT_LOADED.

%% @doc Write into this scheduler's ring the record a traced call of `MFA'
%% by the calling process would get from a match spec's
%% `{message, {{get_seq_token}, {caller}}}' with a token labelled `Label'
%% (the caller left out), without a trace event: the request markers of
%% {@link kprof_tiers} (`kprof_mark'), which so cost the request no event
%% dispatch (doc/internals-tiers.md). `true' when `Gen' is the live
%% generation (a full ring drops and counts the record as any other),
%% `false' when it is not (nothing written); `badarg' for a `Gen' that is not
%% a number or an `MFA' that is not `{Module, Function, Arity}'.
-spec mark(pos_integer(), mfa(), term()) -> boolean().
mark(_Gen, _MFA, _Label) ->
    ?NOT_LOADED.

%% @doc {@link mark/3} with `Payload' as the match spec's third element
%% (`{{get_seq_token}, {caller}, Payload}'): the request's identity of a
%% start marker. A payload over the record's size is not written and is
%% counted as unsupported.
-spec mark(pos_integer(), mfa(), term(), term()) -> boolean().
mark(_Gen, _MFA, _Label, _Payload) ->
    ?NOT_LOADED.

%% @private erl_tracer callback (the NIF): `trace' while `State' is the live
%% generation (or `{meta, Gen}' of it) and the tag is one a record carries,
%% `discard' for other tags and those {@link discard/2} named for the
%% generation, `remove' for a stale state.
-spec enabled(atom(), term(), pid() | port()) -> trace | discard | remove.
enabled(_TraceTag, _State, _Tracee) ->
    ?NOT_LOADED.

%% @private erl_tracer callback (the NIF): writes the event to the ring.
-spec trace(atom(), term(), pid() | port(), term(), map()) -> ok.
trace(_TraceTag, _State, _Tracee, _TraceTerm, _Opts) ->
    ?NOT_LOADED.
