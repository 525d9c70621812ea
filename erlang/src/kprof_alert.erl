%%% @doc The one shape of kprof's alerts: `{kprof_alert, Kind, Info}', sent
%%% to the subscribers of {@link kprof:subscribe/0} (by kprof_guard) and of
%%% {@link kprof_sink:subscribe/0} alike, where `Info' always has
%%% <ul>
%%% <li>`what': what was measured (`lag_ms', `ring_drops', `max_events',
%%%     `rate', ...; `sink_status' when the sink died, the alert's kind
%%%     when the sink gave nothing better);</li>
%%% <li>`value': the measured figure (the sink's exit status for
%%%     `sink_status'; `undefined' when there is none);</li>
%%% <li>`bound': the limit it passed (`undefined' when there is none);</li>
%%% <li>`message': a readable binary, e.g.
%%%     `<<"overload (lag 1.8 s > 1.0 s)">>',</li>
%%% </ul>
%%% and keeps any other detail the sink gave as extra keys (`lag_us',
%%% `max_lag_us', `events', `ring_size', `per_ms', `status', ...).
%%% The sink's own frames (doc/protocol.md) are turned into this shape by
%%% {@link from_sink/2}.
-module(kprof_alert).

-export([from_sink/2, message/2]).

-export_type([info/0]).

-type info() :: #{what := atom(), value := term(), bound := term(),
                  message := binary(), atom() => term()}.

%% The guard's sampling tick (ms), kprof_guard's ?TICK (keep them equal): a
%% ring that stalled for less is not said to have stalled.
-define(TICK, 50).

%% @doc An alert of the sink (`overload' with `lag_us' or `ring_drops',
%% `limit', the `sink_down' of kprof_sink with `status', or any other) in
%% the one shape, its `message' included.
-spec from_sink(atom(), map()) -> info().
from_sink(Kind, Raw) when is_map(Raw) ->
    Info = maps:merge(Raw, measured(Raw, Kind)),
    Info#{message => unicode:characters_to_binary(message(Kind, Info))};
from_sink(Kind, Raw) ->
    from_sink(Kind, #{value => Raw}).

-spec measured(map(), atom()) -> map().
measured(#{what := _, value := _, bound := _}, _Kind) ->
    #{};
measured(#{lag_us := Lag, max_lag_us := Max}, _Kind) ->
    #{what => lag_ms, value => Lag div 1000, bound => Max div 1000};
measured(#{ring_drops := N, ring_size := _}, _Kind) ->
    #{what => ring_drops, value => N, bound => 0};
measured(#{status := Status}, _Kind) ->
    #{what => sink_status, value => Status, bound => undefined};
measured(Raw, Kind) ->
    maps:merge(#{what => Kind, value => undefined, bound => undefined}, Raw).

%% @doc The readable text of an alert or an abort of kind `Kind'.
-spec message(atom(), map()) -> iolist().
message(Kind, #{what := ring_drops, value := N, ring_size := Size, stalled_ms := Ms})
  when Ms >= ?TICK ->
    io_lib:format("~p (the tracer's ring of ~s was full: ~b events lost; the sink had not "
                  "read it for ~ts)", [Kind, bytes(Size), N, secs(Ms)]);
message(Kind, #{what := ring_drops, value := N, ring_size := Size}) ->
    io_lib:format("~p (the tracer's ring of ~s was full: ~b events lost)",
                  [Kind, bytes(Size), N]);
message(Kind, #{what := ring_stalled, value := Ms, bound := B, unread_bytes := U}) ->
    io_lib:format("~p (the sink stopped reading the tracer's ring: ~ts with ~s unread, "
                  "bound ~ts)", [Kind, secs(Ms), bytes(U), secs(B)]);
message(Kind, #{what := port_stalled, value := Ms, bound := B}) ->
    io_lib:format("~p (the sink's port did not answer for ~ts, bound ~ts: its queue is "
                  "backed up, or the sink stopped reading)", [Kind, secs(Ms), secs(B)]);
message(owner_down, #{owner := Pid, reason := Reason, modes := Names}) ->
    io_lib:format("owner_down (~p, which had set up ~p, exited: ~0p); its tracing is off",
                  [Pid, Names, Reason]);
message(Kind, #{what := lag_ms, lag_us := Us, bound := B}) ->
    io_lib:format("~p (lag ~ts > ~ts)", [Kind, secs(Us / 1000), secs(B)]);
message(Kind, #{what := rate, value := V, bound := B, per_ms := PerMs}) ->
    io_lib:format("~p (rate ~b > ~b in ~b ms)", [Kind, V, B, PerMs]);
message(Kind, #{what := sink_status, value := Status}) ->
    io_lib:format("~p (the sink exited: ~0p)", [Kind, Status]);
message(Kind, #{what := What, value := V, bound := B}) when B =/= undefined ->
    io_lib:format("~p (~p ~p > ~p)", [Kind, What, V, B]);
message(Kind, Info) ->
    io_lib:format("~p ~0p", [Kind, maps:without([what, value, bound, message], Info)]).

bytes(B) when B >= 1 bsl 20 -> io_lib:format("~b MiB", [B bsr 20]);
bytes(B) when B >= 1 bsl 10 -> io_lib:format("~b KiB", [B bsr 10]);
bytes(B) -> io_lib:format("~b bytes", [B]).

secs(Ms) when Ms >= 1000 -> io_lib:format("~.1f s", [Ms / 1000]);
secs(Ms) when is_integer(Ms) -> io_lib:format("~b ms", [Ms]);
secs(Ms) when Ms >= 10 -> io_lib:format("~b ms", [round(Ms)]);
secs(Ms) -> io_lib:format("~.1f ms", [Ms]).
