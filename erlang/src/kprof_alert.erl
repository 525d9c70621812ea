%%% @doc The one shape of kprof's alerts: `{kprof_alert, Kind, Info}', sent
%%% to the subscribers of {@link kprof:subscribe/0} (by kprof_guard) and of
%%% {@link kprof_sink:subscribe/0} alike. Every alert is built by {@link
%%% new/5} (kprof_guard, kprof_sink) or, for the sink's frames, which carry
%%% the same keys (doc/internals-protocol.md), by {@link from_map/2}; `Info' always has
%%% <ul>
%%% <li>`what': what was measured (below);</li>
%%% <li>`value': the measured figure (`undefined' when there is none);</li>
%%% <li>`bound': the limit it passed (`undefined' when there is none);</li>
%%% <li>`message': a readable binary, e.g.
%%%     `<<"overload (lag 1.8 s > 1.0 s)">>',</li>
%%% </ul>
%%% and any other detail as extra keys. The kinds and what each measures
%%% ({@link kinds/0}):
%%% <ul>
%%% <li>`overload': `lag_ms' (the sink read a trace message this late;
%%%     `lag_us', `max_lag_us', `events'), `ring_drops' (a tracer ring (one
%%%     per scheduler thread) was full: the events lost; `ring_size',
%%%     `rings' (the drops of each ring by its index), `events' from the sink,
%%%     `ring_size', `stalled_ms' from the guard), `ring_stalled' (the sink
%%%     stopped reading the ring: ms; `unread_bytes'), `port_stalled' (the
%%%     port did not answer: ms), `queue_bytes' (the port's queue),
%%%     `memory_bytes' (the node's memory; `memory', `largest' from the
%%%     guard: {@link kprof_guard_memory});</li>
%%% <li>`limit': `max_events', `rate' (the sink's count; `events', and
%%%     `per_ms' for `rate'), `max_seconds' (the guard's);</li>
%%% <li>`sink_down': `sink_status' (the sink program exited: its exit
%%%     status; `status'), `sink_server' (the `kprof_sink' server is gone:
%%%     its exit reason; `reason', `detail');</li>
%%% <li>`owner_down': `owner' (the server that set a mode's tracing up
%%%     exited: its reason; `owner', `reason', `modes').</li>
%%% </ul>
%%% {@link kprof_guard:abort/2} takes any kind and info: its alert is
%%% {@link from_map/2}'s of them.
-module(kprof_alert).

-export([new/5, from_map/2, kinds/0, message/2, bytes/1]).

-export_type([info/0]).

-type info() :: #{what := atom(), value := term(), bound := term(),
                  message := binary(), atom() => term()}.

%% The guard's sampling tick (ms), kprof_guard's ?TICK (keep them equal): a
%% ring that stalled for less is not said to have stalled.
-define(TICK, 50).

%% @doc The alert of kind `Kind': `What' measured `Value' against `Bound';
%% `Extra' the other keys (its `what', `value', `bound' and `message', if
%% any, are replaced). The message is {@link message/2}'s.
-spec new(atom(), atom(), term(), term(), map()) -> info().
new(Kind, What, Value, Bound, Extra) when is_atom(Kind), is_atom(What), is_map(Extra) ->
    Info = Extra#{what => What, value => Value, bound => Bound},
    Info#{message => unicode:characters_to_binary(message(Kind, Info))}.

%% @doc The alert of a map that carries `what', `value' and `bound' (the
%% sink's frames, doc/internals-protocol.md; {@link kprof_guard:abort/2}'s info): a
%% key the map lacks (a sink of another version, a hand-made abort) is
%% `what => Kind', `value' and `bound' `undefined'; every other key is
%% kept. What is not a map is kept under `detail'.
-spec from_map(atom(), term()) -> info().
from_map(Kind, Raw) when is_map(Raw) ->
    What = case maps:get(what, Raw, Kind) of
               W when is_atom(W) -> W;
               _ -> Kind
           end,
    new(Kind, What, maps:get(value, Raw, undefined), maps:get(bound, Raw, undefined), Raw);
from_map(Kind, Raw) ->
    new(Kind, Kind, undefined, undefined, #{detail => Raw}).

%% @doc The kinds of alert kprof sends and, for each, what it may measure
%% (the `what' of its info).
-spec kinds() -> #{atom() => [atom()]}.
kinds() ->
    #{overload => [lag_ms, ring_drops, ring_stalled, port_stalled, queue_bytes, memory_bytes],
      limit => [max_events, rate, max_seconds],
      sink_down => [sink_status, sink_server],
      owner_down => [owner]}.

%% @doc The readable text of an alert or an abort of kind `Kind'.
-spec message(atom(), map()) -> iolist().
message(Kind, #{what := ring_drops, value := N, ring_size := Size, stalled_ms := Ms})
  when Ms >= ?TICK ->
    io_lib:format("~p (a tracer ring of ~s was full: ~b events lost; the sink had not "
                  "read it for ~ts)", [Kind, bytes(Size), N, secs(Ms)]);
message(Kind, #{what := ring_drops, value := N, ring_size := Size}) ->
    io_lib:format("~p (a tracer ring of ~s was full: ~b events lost)",
                  [Kind, bytes(Size), N]);
message(Kind, #{what := ring_stalled, value := Ms, bound := B, unread_bytes := U}) ->
    io_lib:format("~p (the sink stopped reading the tracer's ring: ~ts with ~s unread, "
                  "bound ~ts)", [Kind, secs(Ms), bytes(U), secs(B)]);
message(Kind, #{what := port_stalled, value := Ms, bound := B}) ->
    io_lib:format("~p (the sink's port did not answer for ~ts, bound ~ts: its queue is "
                  "backed up, or the sink stopped reading)", [Kind, secs(Ms), secs(B)]);
message(owner_down, #{what := owner, owner := Pid, reason := Reason, modes := Names}) ->
    io_lib:format("owner_down (~p, which had set up ~p, exited: ~0p); its tracing is off",
                  [Pid, Names, Reason]);
message(Kind, #{what := memory_bytes, value := V, bound := B, memory := Parts, largest := Big}) ->
    Part = fun(K) -> bytes(maps:get(K, Parts, 0)) end,
    %% The rest of the VM's own: ports' queues (a port tracer's backlog),
    %% drivers, NIFs, the tracer's sessions.
    Other = maps:get(system, Parts, 0) - lists:sum([maps:get(K, Parts, 0)
                                                    || K <- [binary, ets, code, atom]]),
    io_lib:format("~p (node memory ~s > ~s: processes ~s, binary ~s, ets ~s, code ~s, "
                  "other ~s~ts)",
                  [Kind, bytes(V), bytes(B), Part(processes), Part(binary), Part(ets), Part(code),
                   bytes(max(0, Other)),
                   [io_lib:format("; largest process ~p~ts ~s, ~b messages",
                                  [P, [[" ", atom_to_list(R)] || is_atom(R), R =/= []], bytes(M), Q])
                    || #{pid := P, memory := M, registered_name := R, message_queue_len := Q}
                           <- lists:sublist(Big, 1)]]);
message(Kind, #{what := lag_ms, lag_us := Us, bound := B}) ->
    io_lib:format("~p (lag ~ts > ~ts)", [Kind, secs(Us / 1000), secs(B)]);
message(Kind, #{what := rate, value := V, bound := B, per_ms := PerMs}) ->
    io_lib:format("~p (rate ~b > ~b in ~b ms)", [Kind, V, B, PerMs]);
message(Kind, #{what := sink_status, value := Status}) ->
    io_lib:format("~p (the sink exited: ~0p)", [Kind, Status]);
message(Kind, #{what := sink_server, value := Why}) ->
    io_lib:format("~p (kprof_sink, the sink's server, is gone: ~0p)", [Kind, Why]);
message(Kind, #{what := What, value := V, bound := B}) when B =/= undefined ->
    io_lib:format("~p (~p ~p > ~p)", [Kind, What, V, B]);
message(Kind, Info) ->
    io_lib:format("~p ~0p", [Kind, maps:without([what, value, bound, message], Info)]).

%% @doc A size for a message: whole MiB, KiB or bytes, rounded down (the
%% alerts' and the sink's stall reports').
-spec bytes(non_neg_integer()) -> iolist().
bytes(B) when B >= 1 bsl 20 -> io_lib:format("~b MiB", [B bsr 20]);
bytes(B) when B >= 1 bsl 10 -> io_lib:format("~b KiB", [B bsr 10]);
bytes(B) -> io_lib:format("~b bytes", [B]).

secs(Ms) when Ms >= 1000 -> io_lib:format("~.1f s", [Ms / 1000]);
secs(Ms) when is_integer(Ms) -> io_lib:format("~b ms", [Ms]);
secs(Ms) when Ms >= 10 -> io_lib:format("~b ms", [round(Ms)]);
secs(Ms) -> io_lib:format("~.1f ms", [Ms]).
