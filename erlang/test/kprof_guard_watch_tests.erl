%%% @doc The guard's decisions (kprof_guard_watch) from made-up figures: no
%%% process, no sink, no clock. Every abort's alert is checked against
%%% kprof's one alert shape.
-module(kprof_guard_watch_tests).

-include_lib("eunit/include/eunit.hrl").

-define(MiB, (1 bsl 20)).
-define(GiB, (1 bsl 30)).

limits() ->
    #{max_lag_ms => 1000, max_stall_ms => 500, max_queue_bytes => 4 * ?MiB,
      max_memory_bytes => default, max_events => infinity, rate => infinity,
      max_seconds => infinity}.

bounds() -> bounds(#{}).
bounds(L) -> kprof_guard_watch:bounds(maps:merge(limits(), L), 100 * ?MiB, 0).

readings(Now) -> readings(Now, #{}).
readings(Now, R) ->
    maps:merge(#{now => Now, port => port, memory => 200 * ?MiB, ring => undefined}, R).

ring(Head, Tail, Drops) -> #{head => Head, tail => Tail, drops => Drops, size => 65536}.

%% An abort of Kind measuring What; its alert in the one shape.
abort(Kind, What, Tick) ->
    {abort, Kind, Info, Watchdog, _W} = Tick,
    ?assertMatch(#{what := What}, kprof_test_util:alert_conforms(Kind, Info)),
    {Info, Watchdog}.

quiet_test() ->
    W0 = kprof_guard_watch:new(0),
    %% The port's queue asked; the clock waits for its answer; reloads for a second.
    {ok, [probe], W1} = kprof_guard_watch:tick(readings(10), bounds(), W0),
    W2 = kprof_guard_watch:probing(10, make_ref(), W1),
    ?assertMatch({ok, [], _}, kprof_guard_watch:tick(readings(20), bounds(), W2)).

no_sink_test() ->
    T = kprof_guard_watch:tick(readings(10, #{port => undefined}), bounds(),
                               kprof_guard_watch:new(0)),
    ?assertMatch({#{value := noproc, reason := no_sink}, false},
                 abort(sink_down, sink_server, T)).

ring_drops_test() ->
    W0 = kprof_guard_watch:new(0),
    {ok, _, W1} = kprof_guard_watch:tick(readings(10, #{ring => ring(100, 100, 7)}), bounds(), W0),
    %% Drops since the watch began, not the ring's total; the sink is to be pinged.
    T = kprof_guard_watch:tick(readings(60, #{ring => ring(200, 150, 10)}), bounds(), W1),
    ?assertMatch({#{value := 3, bound := 0, ring_size := 65536}, true},
                 abort(overload, ring_drops, T)).

ring_stalled_test() ->
    W0 = kprof_guard_watch:new(0),
    {ok, _, W1} = kprof_guard_watch:tick(readings(10, #{ring => ring(100, 40, 0)}), bounds(), W0),
    %% Moving, or nothing to read: never stalled (the guard's ticks on time).
    {ok, _, W2} = kprof_guard_watch:tick(readings(50, #{ring => ring(300, 90, 0)}), bounds(),
                                         on_time(20, 50, W1, #{ring => ring(100, 40, 0)})),
    W3 = on_time(100, 550, W2, #{ring => ring(300, 90, 0)}),
    T = kprof_guard_watch:tick(readings(550, #{ring => ring(310, 90, 0)}), bounds(), W3),
    ?assertMatch({#{value := 500, bound := 500, unread_bytes := 220}, true},
                 abort(overload, ring_stalled, T)),
    {ok, _, _} = kprof_guard_watch:tick(readings(550, #{ring => ring(90, 90, 0)}), bounds(), W3),
    %% infinity: no bound.
    {ok, _, _} = kprof_guard_watch:tick(readings(600, #{ring => ring(310, 90, 0)}),
                                        bounds(#{max_stall_ms => infinity}), W3).

%% The guard's ticks, on time, from From to before To (no bound crossed).
on_time(From, To, W0) -> on_time(From, To, W0, #{}).
on_time(From, To, W0, R) ->
    lists:foldl(fun(Now, W) ->
                        {ok, _, W1} = kprof_guard_watch:tick(readings(Now, R), bounds(), W),
                        W1
                end, W0, lists:seq(From, To - 1, kprof_guard_watch:tick_ms())).

port_stalled_test() ->
    Ref = make_ref(),
    W0 = kprof_guard_watch:probing(10, Ref, kprof_guard_watch:new(0)),
    %% The helper still waits for the port past max_lag_ms, the guard's own
    %% ticks on time...
    T1 = kprof_guard_watch:tick(readings(1010), bounds(), on_time(50, 1010, W0)),
    ?assertMatch({#{value := 1000, bound := 1000}, false}, abort(overload, port_stalled, T1)),
    %% ... or answered, late.
    W1 = kprof_guard_watch:probed(Ref, 1049, {queue_size, 0}, on_time(50, 1010, W0)),
    ?assertEqual(0, kprof_guard_watch:queue(W1)),
    T2 = kprof_guard_watch:tick(readings(1050), bounds(), W1),
    ?assertMatch({#{value := 1039}, false}, abort(overload, port_stalled, T2)),
    %% Another helper's answer is not taken.
    ?assertEqual(W0, kprof_guard_watch:probed(make_ref(), 20, {queue_size, 9}, W0)).

%% The node itself stopped (its CPUs taken, every scheduler waiting): the
%% guard's tick comes 1,250 ms late, and the port's wait is not charged
%% with it; a port still silent once the node runs again is.
node_late_test() ->
    Ref = make_ref(),
    W0 = on_time(50, 110, kprof_guard_watch:probing(10, Ref, kprof_guard_watch:new(0))),
    {ok, _, W1} = kprof_guard_watch:tick(readings(1400), bounds(), W0),
    %% Answered then: 1,380 ms less the node's 1,250.
    Answered = kprof_guard_watch:probed(Ref, 1390, {queue_size, 0}, W1),
    ?assertMatch(#{last_probe_ms := 130}, Answered),
    {ok, _, _} = kprof_guard_watch:tick(readings(1450), bounds(), Answered),
    %% Not answered: the wait counts again from the node's return.
    W2 = on_time(1450, 2300, W1),
    T = kprof_guard_watch:tick(readings(2300), bounds(), W2),
    ?assertMatch({#{value := 1040, bound := 1000}, false}, abort(overload, port_stalled, T)).

%% The node stopped with the sink (a machine's CPUs taken by others): the
%% guard's tick comes 1,250 ms late with the ring's tail where it was, and
%% the ring is not charged with it; a tail still still once the node runs
%% again is, from then.
ring_node_late_test() ->
    Ring = #{ring => ring(300, 90, 0)},
    W0 = on_time(50, 110, kprof_guard_watch:new(0), Ring),
    {ok, _, W1} = kprof_guard_watch:tick(readings(1400, Ring), bounds(), W0),
    W2 = on_time(1450, 1800, W1, Ring),
    T = kprof_guard_watch:tick(readings(1800, Ring), bounds(), W2),
    ?assertMatch({#{value := 500, bound := 500, unread_bytes := 210}, true},
                 abort(overload, ring_stalled, T)).

%% Through the tracer NIF's ring no trace message waits behind the port: a
%% port slow to answer is no lag of theirs (the ring's bounds watch the
%% sink). Its queue's size, answered, still counts.
ring_tracer_test() ->
    Ref = make_ref(),
    Ring = #{tracer => ring},
    W0 = on_time(50, 5000, kprof_guard_watch:probing(10, Ref, kprof_guard_watch:new(0)), Ring),
    {ok, _, _} = kprof_guard_watch:tick(readings(5000, Ring), bounds(), W0),
    abort(overload, port_stalled, kprof_guard_watch:tick(readings(5000), bounds(), W0)),
    W1 = kprof_guard_watch:probed(Ref, 5010, {queue_size, 5 * ?MiB}, W0),
    abort(overload, queue_bytes, kprof_guard_watch:tick(readings(5050, Ring), bounds(), W1)).

queue_bytes_test() ->
    Ref = make_ref(),
    W = kprof_guard_watch:probed(Ref, 15, {queue_size, 5 * ?MiB},
                                 kprof_guard_watch:probing(10, Ref, kprof_guard_watch:new(0))),
    T = kprof_guard_watch:tick(readings(20), bounds(), W),
    ?assertMatch({#{value := 5242880, bound := 4194304}, false},
                 abort(overload, queue_bytes, T)),
    {ok, _, _} = kprof_guard_watch:tick(readings(20), bounds(#{max_queue_bytes => infinity}), W).

memory_bytes_test() ->
    %% default: the memory at the watch's start plus 1 GiB.
    T = kprof_guard_watch:tick(readings(10, #{memory => 100 * ?MiB + ?GiB + 1}), bounds(),
                               kprof_guard_watch:new(0)),
    ?assertMatch({#{bound := 1178599424}, false}, abort(overload, memory_bytes, T)),
    {ok, _, _} = kprof_guard_watch:tick(readings(10, #{memory => 100 * ?MiB + ?GiB}), bounds(),
                                        kprof_guard_watch:new(0)),
    T2 = kprof_guard_watch:tick(readings(10), bounds(#{max_memory_bytes => ?MiB}),
                                kprof_guard_watch:new(0)),
    ?assertMatch({#{bound := 1048576}, false}, abort(overload, memory_bytes, T2)).

max_seconds_test() ->
    W = kprof_guard_watch:new(0),
    {ok, _, _} = kprof_guard_watch:tick(readings(1999), bounds(#{max_seconds => 2}), W),
    T = kprof_guard_watch:tick(readings(2000), bounds(#{max_seconds => 2}), W),
    ?assertMatch({#{value := 2, bound := 2}, false}, abort(limit, max_seconds, T)).

%% The first bound in the documented order wins: no sink before the ring,
%% the ring before the port.
order_test() ->
    Ref = make_ref(),
    W0 = kprof_guard_watch:probing(0, Ref, kprof_guard_watch:new(0)),
    {ok, _, W} = kprof_guard_watch:tick(readings(10, #{ring => ring(1, 1, 0)}), bounds(), W0),
    W1 = on_time(60, 1010, W),
    R = readings(1010, #{ring => ring(1, 1, 1), memory => 10 * ?GiB}),
    abort(overload, ring_drops, kprof_guard_watch:tick(R, bounds(), W1)),
    abort(sink_down, sink_server, kprof_guard_watch:tick(R#{port := undefined}, bounds(), W1)),
    abort(overload, port_stalled, kprof_guard_watch:tick(R#{ring := undefined}, bounds(), W1)).

due_test() ->
    Ref = make_ref(),
    W0 = kprof_guard_watch:probed(Ref, 5, {queue_size, 100},
                                  kprof_guard_watch:probing(0, Ref, kprof_guard_watch:new(0))),
    {ok, [probe], W1} = kprof_guard_watch:tick(readings(999), bounds(), W0),
    W2 = kprof_guard_watch:probed(Ref, 1000, {queue_size, 100},
                                  kprof_guard_watch:probing(999, Ref, W1)),
    %% A second on: the clock (the queue is short) and reloads, once each.
    {ok, [probe, clock, reload], W3} = kprof_guard_watch:tick(readings(1000), bounds(), W2),
    W4 = kprof_guard_watch:probing(1000, Ref, W3),
    {ok, [], _} = kprof_guard_watch:tick(readings(1100), bounds(), W4),
    %% Behind a long queue the clock would come late: not sent.
    W5 = kprof_guard_watch:probed(Ref, 1001, {queue_size, 100000}, W4),
    {ok, [probe, reload], _} = kprof_guard_watch:tick(readings(2000), bounds(), W5).

unwatched_test() ->
    Ref = make_ref(),
    W = kprof_guard_watch:probing(5, Ref, kprof_guard_watch:new(0)),
    {ok, _, W1} = kprof_guard_watch:tick(readings(10, #{ring => ring(5, 5, 0)}), bounds(), W),
    ?assertMatch(#{ring := undefined, probe := undefined}, kprof_guard_watch:unwatched(W1)).

strictest_test() ->
    A = #{max_lag_ms => 1000, max_events => infinity, rate => {100, 1000},
          max_memory_bytes => default},
    B = #{max_lag_ms => 300, max_events => 500, rate => {20, 100},
          max_memory_bytes => ?GiB},
    ?assertEqual(B, kprof_guard_watch:strictest(A, B, true)),
    ?assertEqual(#{max_lag_ms => 300, max_events => 500, rate => {100, 1000},
                   max_memory_bytes => ?GiB},
                 kprof_guard_watch:strictest(A, B, false)).

sink_bounds_test() ->
    ?assertEqual({0, 0, 0}, kprof_guard_watch:sink_bounds(limits())),
    ?assertEqual({500, 20, 100},
                 kprof_guard_watch:sink_bounds(#{max_events => 500, rate => {20, 100}})),
    ?assert(kprof_guard_watch:sink_limits_due(true, {0, 0, 0}, {5, 0, 0})),
    ?assertNot(kprof_guard_watch:sink_limits_due(true, {0, 0, 0}, {0, 0, 0})),
    ?assert(kprof_guard_watch:sink_limits_due(true, {5, 0, 0}, {5, 0, 0})),
    ?assertNot(kprof_guard_watch:sink_limits_due(false, {5, 0, 0}, {5, 0, 0})),
    ?assert(kprof_guard_watch:sink_limits_due(false, {4, 0, 0}, {5, 0, 0})).
