%%% @doc What {@link kprof_guard} decides at each tick, as functions of
%%% their arguments: the guard reads the figures (its clock, the sink's
%%% port, the node's memory, the tracer's ring counters) and keeps a
%%% {@type watch()} between ticks; {@link tick/3} says whether a bound was
%%% crossed (an abort, with its alert, built by {@link kprof_alert}) or what
%%% the guard does next (ask the port's queue, send the sink the VM's clock,
%%% look for reloaded code). The limits' arithmetic is here too: the
%%% strictest of several modes, the sink's share of them. Nothing here
%%% sends, waits or reads a clock, so every decision is unit-tested with
%%% made-up figures (kprof_guard_watch_tests).
-module(kprof_guard_watch).

-export([new/1, tick/3, probing/3, probed/4, unwatched/1, queue/1, tick_ms/0]).
-export([bounds/3, strictest/3, sink_bounds/1, sink_limits_due/3]).

-export_type([watch/0, readings/0, bounds/0, action/0, sink_limits/0]).

%% The guard's tick (ms): how often it reads the figures.
-define(TICK_MS, 50).
-define(CLOCK_EVERY, 1000).
-define(RELOAD_EVERY, 1000).
%% The VM's clock is sent only while the port's queue is shorter than this:
%% behind a longer one it would arrive late (and be taken as it is).
-define(QUIET_QUEUE, 65536).

%% What one tick reads: the guard's clock (ms), the sink's port, the
%% node's memory, the tracer's ring counters (`kprof_tracer:ring_info/0'),
%% and where kprof's trace events go: the tracer NIF's ring when it has a
%% live generation (`kprof_tracer:live/0'), else the sink's port (the
%% default).
-type readings() :: #{now := integer(), port := port() | undefined,
                      memory := non_neg_integer(),
                      tracer => ring | port,
                      ring := undefined | #{head := non_neg_integer(),
                                            tail := non_neg_integer(),
                                            drops := non_neg_integer(),
                                            size := non_neg_integer(), atom() => term()}}.
%% The bounds in force (bounds/3): the limits, `max_memory_bytes' in
%% bytes, and when the first armed mode started (ms).
-type bounds() :: #{limits := kprof_guard:limits(), max_memory := number() | infinity,
                    since := integer()}.
%% What the guard keeps between ticks: the ring's reader as last seen (its
%% tail, when it last moved or had nothing to read, the drops when the watch
%% began); the port's queue asked by a helper (its ref and when, ms), the
%% last answer and how long it took; when the clock and reloads were last
%% done; the last tick and how late the ticks came in all (ms past the
%% tick's period: the node's own delay, which the port's is not charged
%% with), and that sum when the port was asked.
-type watch() :: #{ring := undefined | #{tail := non_neg_integer(), moved := integer(),
                                          drops0 := non_neg_integer()},
                   probe := undefined | {reference(), integer(), non_neg_integer()},
                   queue := undefined | non_neg_integer(),
                   last_probe_ms := non_neg_integer(),
                   last_tick := integer(),
                   late_ms := non_neg_integer(),
                   last_clock := integer(),
                   last_reload := integer()}.
%% probe: ask the port's queue (then probing/3); clock: send the sink the
%% VM's clock; reload: put back the patterns a code reload dropped.
-type action() :: probe | clock | reload.
%% {MaxEvents, RateMax, RatePerMs}, 0 for no bound: the sink's `limits'.
-type sink_limits() :: {non_neg_integer(), non_neg_integer(), non_neg_integer()}.

%%%%%%%%%%%%%%%
%%% WATCHING %%%
%%%%%%%%%%%%%%%

%% @doc A watch starting at `Now' (ms).
-spec new(integer()) -> watch().
new(Now) ->
    #{ring => undefined, probe => undefined, queue => undefined, last_probe_ms => 0,
      last_tick => Now, late_ms => 0, last_clock => Now, last_reload => Now}.

%% @doc The guard's tick, ms.
-spec tick_ms() -> pos_integer().
tick_ms() -> ?TICK_MS.

%% @doc One tick: the first bound crossed, in this order: no sink, the ring
%% (dropped events, or its reader stalled: `Watchdog' is then `true', the
%% sink is to be pinged and killed if it does not answer), the port slow to
%% answer its queue's size when the trace events go through it (its
%% backlog's lag, less the node's own delay:
%% how late the guard's own ticks came meanwhile, as when the machine's CPUs
%% are taken by others or every scheduler waits for a trace pattern set on
%% every module), its queue, the node's memory, `max_seconds'. Otherwise
%% what is due.
-spec tick(readings(), bounds(), watch()) ->
          {abort, atom(), kprof_alert:info(), Watchdog :: boolean(), watch()}
        | {ok, [action()], watch()}.
tick(R = #{now := Now, port := Port, memory := Mem, ring := Ring}, B = #{limits := L}, W0) ->
    {RingVerdict, W} = watch_ring(Now, Ring, maps:get(max_stall_ms, L, infinity), late(Now, W0)),
    case bound_crossed(Now, Port, Mem, RingVerdict, B, maps:get(tracer, R, port), W) of
        {abort, Kind, Info, Watchdog} -> {abort, Kind, Info, Watchdog, W};
        ok -> due(Now, Port, W)
    end.

%% @doc The helper asking the port's queue was started at `Now' (ms).
-spec probing(integer(), reference(), watch()) -> watch().
probing(Now, Ref, W = #{late_ms := Late}) ->
    W#{probe := {Ref, Now, Late}}.

%% @doc The helper `Ref' answered at `Answered' (ms, its own clock: the
%% guard may have been busy since) with `port_info/2''s answer; another
%% helper's answer is not taken. How long it took is less the node's own
%% delay since it was asked (as the ticks so far measured it).
-spec probed(reference(), integer(), term(), watch()) -> watch().
probed(Ref, Answered, Queue, W = #{probe := {Ref, Asked, Late0}, late_ms := Late}) ->
    Q = case Queue of
            {queue_size, N} when is_integer(N) -> N;
            _ -> undefined
        end,
    W#{probe := undefined, queue := Q,
       last_probe_ms := max(0, Answered - Asked - (Late - Late0))};
probed(_Ref, _Answered, _Queue, W) ->
    W.

%% @doc Nothing armed any more: the ring and the port are seen afresh by
%% the next watch.
-spec unwatched(watch()) -> watch().
unwatched(W) ->
    W#{ring := undefined, probe := undefined}.

%% @doc The port's queue as last answered (bytes).
-spec queue(watch()) -> undefined | non_neg_integer().
queue(#{queue := Q}) -> Q.

-spec bound_crossed(integer(), port() | undefined, non_neg_integer(),
                    ok | {overload, kprof_alert:info()}, bounds(), ring | port, watch()) ->
          ok | {abort, atom(), kprof_alert:info(), boolean()}.
bound_crossed(_Now, undefined, _Mem, _Ring, _B, _Events, _W) ->
    {abort, sink_down,
     kprof_alert:new(sink_down, sink_server, noproc, undefined, #{reason => no_sink}), false};
bound_crossed(_Now, _Port, _Mem, {overload, Info}, _B, _Events, _W) ->
    {abort, overload, Info, true};
bound_crossed(Now, _Port, Mem, ok, #{limits := L, max_memory := MaxMem, since := Since}, Events,
              W) ->
    %% (No watchdog from here on: a port slow to answer has a backlog in
    %% front of the sink, which is alive and will get through it.) Through
    %% the ring, no trace message waits behind the port, whose answer is
    %% then no lag of theirs: the ring's own bounds above watch the sink.
    Stall = case Events of
                port -> maps:get(max_lag_ms, L, infinity);
                ring -> infinity
            end,
    Waiting = case W of
                  #{probe := {_, Asked, Late0}} -> max(0, Now - Asked - (late_ms(W) - Late0));
                  _ -> 0
              end,
    Queue = maps:get(queue, W),
    MaxQueue = maps:get(max_queue_bytes, L, infinity),
    MaxSecs = maps:get(max_seconds, L, infinity),
    Crossed =
        [{overload, port_stalled, maps:get(last_probe_ms, W), Stall}
         || is_integer(Stall), maps:get(last_probe_ms, W) >= Stall]
        ++ [{overload, port_stalled, Waiting, Stall} || is_integer(Stall), Waiting >= Stall]
        ++ [{overload, queue_bytes, Queue, MaxQueue}
            || is_integer(Queue), is_integer(MaxQueue), Queue > MaxQueue]
        ++ [{overload, memory_bytes, Mem, MaxMem} || is_number(MaxMem), Mem > MaxMem]
        ++ [{limit, max_seconds, (Now - Since) div 1000, MaxSecs}
            || is_integer(MaxSecs), Now - Since >= MaxSecs * 1000],
    case Crossed of
        [{Kind, What, Value, Bound} | _] ->
            {abort, Kind, kprof_alert:new(Kind, What, Value, Bound, #{}), false};
        [] ->
            ok
    end.

%% This tick's lateness added up: the time past the tick's period since the
%% last one (a timer's usual jitter is a millisecond or two; a node starved
%% of CPU, or stopped, comes back seconds late).
-spec late(integer(), watch()) -> watch().
late(Now, W = #{last_tick := Last, late_ms := Late}) ->
    W#{last_tick := Now, late_ms := Late + max(0, Now - Last - ?TICK_MS)}.

-spec late_ms(watch()) -> non_neg_integer().
late_ms(#{late_ms := Late}) -> Late.

%% The ring's reader, seen from the VM side through the shared counters
%% (never by asking the sink): `ok', or `{overload, Info}' when the ring
%% dropped events since the watch began, or held unread events while its
%% tail stood still for max_stall_ms, less the node's own delay since it
%% last moved (as the port's wait: a machine whose CPUs are taken by others
%% starves the sink and this guard alike, and a sink that reads as soon as
%% it runs again is no stalled sink).
-spec watch_ring(integer(), undefined | map(), pos_integer() | infinity, watch()) ->
          {ok | {overload, kprof_alert:info()}, watch()}.
watch_ring(Now, #{head := H, tail := T, drops := D, size := Size}, Bound,
           W = #{ring := Seen}) ->
    Late = late_ms(W),
    R0 = case Seen of
             undefined -> #{tail => T, moved => Now, late0 => Late, drops0 => D};
             _ -> Seen
         end,
    R = case H =:= T orelse T =/= maps:get(tail, R0) of
            true -> R0#{tail := T, moved := Now, late0 := Late};
            false -> R0
        end,
    Stalled = max(0, Now - maps:get(moved, R) - (Late - maps:get(late0, R))),
    Verdict =
        if
            D > map_get(drops0, R) ->
                {overload, kprof_alert:new(overload, ring_drops, D - map_get(drops0, R), 0,
                                           #{ring_size => Size, stalled_ms => Stalled})};
            is_integer(Bound), Stalled >= Bound ->
                {overload, kprof_alert:new(overload, ring_stalled, Stalled, Bound,
                                           #{unread_bytes => H - T})};
            true ->
                ok
        end,
    {Verdict, W#{ring := R}};
watch_ring(_Now, _NoRing, _Bound, W) ->
    {ok, W}.

%% The port's queue asked unless a helper is still at it; the clock once a
%% second while the queue is short; reloads once a second.
-spec due(integer(), port() | undefined, watch()) -> {ok, [action()], watch()}.
due(Now, Port, W = #{probe := Probe, queue := Queue, last_clock := Clock,
                     last_reload := Reload}) ->
    ClockDue = Now - Clock >= ?CLOCK_EVERY andalso is_integer(Queue) andalso
        Queue < ?QUIET_QUEUE,
    ReloadDue = Now - Reload >= ?RELOAD_EVERY,
    Actions = [probe || Port =/= undefined, Probe =:= undefined]
        ++ [clock || ClockDue] ++ [reload || ReloadDue],
    W1 = case ClockDue of true -> W#{last_clock := Now}; false -> W end,
    W2 = case ReloadDue of true -> W1#{last_reload := Now}; false -> W1 end,
    {ok, Actions, W2}.

%%%%%%%%%%%%%%
%%% LIMITS %%%
%%%%%%%%%%%%%%

%% @doc The bounds a tick judges: `Limits', the memory bound in bytes (by
%% default the node's memory when the watch began, `MemBase', plus 1 GiB),
%% and `Since', when the first armed mode started (ms).
-spec bounds(kprof_guard:limits(), non_neg_integer(), integer()) -> bounds().
bounds(Limits, MemBase, Since) ->
    MaxMem = case maps:get(max_memory_bytes, Limits, default) of
                 default -> MemBase + (1 bsl 30);
                 Bytes -> Bytes
             end,
    #{limits => Limits, max_memory => MaxMem, since => Since}.

%% @doc Several modes armed: each bound is the strictest of theirs
%% (`Fresh': the first mode, whose limits are taken as they are).
-spec strictest(map(), map(), boolean()) -> map().
strictest(_Old, New, true) -> New;
strictest(Old, New, false) ->
    maps:merge_with(fun(_K, A, B) -> min_limit(A, B) end, Old, New).

-spec min_limit(term(), term()) -> term().
min_limit(infinity, B) -> B;
min_limit(A, infinity) -> A;
min_limit(default, B) -> B;
min_limit(A, default) -> A;
min_limit({M1, P1}, {M2, P2}) ->
    case M1 / P1 =< M2 / P2 of
        true -> {M1, P1};
        false -> {M2, P2}
    end;
min_limit(A, B) -> min(A, B).

%% @doc The sink's `max_events' and `rate' of these limits, as its
%% `limits' command takes them (0: no bound).
-spec sink_bounds(map()) -> sink_limits().
sink_bounds(L) ->
    Max = case maps:get(max_events, L, infinity) of
              M when is_integer(M), M > 0 -> M;
              _ -> 0
          end,
    case maps:get(rate, L, infinity) of
        {RateMax, PerMs} when is_integer(RateMax), RateMax > 0,
                              is_integer(PerMs), PerMs > 0 -> {Max, RateMax, PerMs};
        _ -> {Max, 0, 0}
    end.

%% @doc Whether the sink is to be sent `Want' when it has `Have': a fresh
%% start sends whatever is set, zeros too (limits left tripped or set by a
%% start that failed are replaced); later, only a change.
-spec sink_limits_due(boolean(), sink_limits(), sink_limits()) -> boolean().
sink_limits_due(true, Want, Have) ->
    Want =/= {0, 0, 0} orelse Have =/= {0, 0, 0};
sink_limits_due(false, Want, Have) ->
    Want =/= Have.
