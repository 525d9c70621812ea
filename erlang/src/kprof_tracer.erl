%%% @doc The tracer module kprof's tiers trace with: a NIF that writes each
%%% `call' and `return_to' event into a ring of shared memory that
%%% `kprof_sink' reads (include/ks_ring.h, doc/protocol.md "The ring").
%%%
%%% A port tracer costs the traced process a `term_to_binary' and a port
%%% task per event, and another scheduler a `writev' per event; this one
%%% writes a 48 to 64 byte record with no system call (`make bench-tiers'
%%% shows both side by side). When the NIF cannot load (no priv/
%%% kprof_tracer.so), {@link available/0} says so and the tiers use the
%%% port tracer.
%%%
%%% Used as `erlang:trace(Pids, true, [{tracer, kprof_tracer, Gen} | Flags])'
%%% after {@link attach/2} made `Gen' the live generation; a tracer of any
%%% other generation removes itself from the process at its next event.
-module(kprof_tracer).

-export([available/0, attach/2, detach/0]).
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
-spec detach() -> ok.
detach() ->
    ?NOT_LOADED.

%% @private erl_tracer callback (the NIF): `trace' while `State' is the live
%% generation, else `remove'.
-spec enabled(atom(), term(), pid() | port()) -> trace | remove.
enabled(_TraceTag, _State, _Tracee) ->
    ?NOT_LOADED.

%% @private erl_tracer callback (the NIF): writes the event to the ring.
-spec trace(atom(), term(), pid() | port(), term(), map()) -> ok.
trace(_TraceTag, _State, _Tracee, _TraceTerm, _Opts) ->
    ?NOT_LOADED.
