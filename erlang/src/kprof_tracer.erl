%%% @doc The tracer module kprof traces with: a NIF that writes each trace
%%% event (`call', `return_to', `in'/`out', `spawn'/`spawned'/`exit'/
%%% `register', GC start and end, a meta pattern's `call', `return_from' and
%%% `exception_from') into a ring of shared memory that `kprof_sink' reads
%%% (include/ks_ring.h, doc/internals-ring.md). Tiers and flame
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
%%% event. {@link ring_info/0} reads the ring's counters without asking the
%%% sink anything: `kprof_guard' watches the reader with it.
-module(kprof_tracer).

-export([available/0, attach/2, detach/0, resume/1, release/0, live/0, ring_info/0,
         budget/2, budget/0]).
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

%% @doc The mapped ring's counters, read from shared memory as they are:
%% `head' (bytes reserved by writers), `tail' (bytes the sink has read),
%% `reads' (the sink's drains), `drops' (events lost: the ring was full),
%% `unsupported', `written' (records), `size', `closed', `live'; or
%% `undefined' when no ring is mapped.
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

%% @private erl_tracer callback (the NIF): `trace' while `State' is the live
%% generation (or `{meta, Gen}' of it) and the tag is one a record carries,
%% `discard' for other tags, `remove' for a stale state.
-spec enabled(atom(), term(), pid() | port()) -> trace | discard | remove.
enabled(_TraceTag, _State, _Tracee) ->
    ?NOT_LOADED.

%% @private erl_tracer callback (the NIF): writes the event to the ring.
-spec trace(atom(), term(), pid() | port(), term(), map()) -> ok.
trace(_TraceTag, _State, _Tracee, _TraceTerm, _Opts) ->
    ?NOT_LOADED.
