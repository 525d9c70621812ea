%%% @doc EUnit: what the tiers' tracing costs the node (kprof_tiers_cost):
%%% the calibration, the estimate in kprof:status() while tiers run, and
%%% max_overhead lowering the sampled fraction, said in the report's header.
-module(kprof_tiers_cost_tests).

-include_lib("eunit/include/eunit.hrl").

-define(W, kprof_tiers_work).
-define(TIERS, [{a, [{?W, sleep_a, 1}]}, {b, [{?W, burn_a, 1}]}]).

cost_test_() ->
    {foreach, fun ?W:setup/0, fun ?W:cleanup/1,
     [{"the calibration: a cost per event, with the rounds it came from", fun calibrate/0},
      {"status while tiers run: the estimate, the sample; undefined after stop",
       {timeout, 60, fun status_estimate/0}},
      {"max_overhead below the estimate lowers the sample; the header says so",
       {timeout, 120, fun max_overhead_lowers/0}}]}.

next_ppm_test() ->
    %% Above the bound: in proportion, a tenth under it.
    ?assertEqual(45000, kprof_tiers_cost:next_ppm(0.2, 0.01, 1000000, 1000000)),
    ?assertEqual(1, kprof_tiers_cost:next_ppm(0.9, 1.0e-9, 10, 1000000)),
    %% Below half of it: doubled back, up to the sample given.
    ?assertEqual(90000, kprof_tiers_cost:next_ppm(0.004, 0.01, 45000, 1000000)),
    ?assertEqual(500000, kprof_tiers_cost:next_ppm(0.0, 0.01, 300000, 500000)),
    %% In between, or at the sample given: kept.
    ?assertEqual(45000, kprof_tiers_cost:next_ppm(0.007, 0.01, 45000, 1000000)),
    ?assertEqual(1000000, kprof_tiers_cost:next_ppm(0.001, 0.01, 1000000, 1000000)).

calibrate() ->
    Tracer = kprof_sink:tracer(),
    #{per_event_ns := Ns, rounds := Rounds, events := Events} =
        kprof_tiers_cost:calibrate(Tracer),
    ?assert(is_integer(Ns) andalso Ns > 0),
    ?assertEqual(42000, Events),
    ?assertEqual(21, length(Rounds)),
    %% The cost is what the fastest rounds say.
    Plain = lists:min([U || {U, _} <- Rounds]),
    Traced = lists:min([T || {_, T} <- Rounds]),
    ?assertEqual(max(0, (Traced - Plain) div 2000), Ns),
    %% Kept: the same measure again, and nothing left traced.
    ?assertMatch(#{per_event_ns := Ns}, kprof_tiers_cost:calibrate(Tracer)),
    ?assertEqual({traced, false}, erlang:trace_info({kprof_tiers_cost, step, 1}, traced)).

%% Requests in a loop until Pred(Overhead) holds; the last overhead.
until(Pred, Deadline) ->
    ?W:run_requests(20, x, fun() -> ?W:burn_a(200) end),
    #{tiers_overhead := O} = kprof:status(),
    case Pred(O) orelse erlang:monotonic_time(millisecond) > Deadline of
        true -> O;
        false -> until(Pred, Deadline)
    end.

deadline(S) ->
    erlang:monotonic_time(millisecond) + 1000 * S.

status_estimate() ->
    ?assertMatch(#{tiers_overhead := undefined}, kprof:status()),
    ok = kprof:start_tiers(?TIERS, #{}),
    O = until(fun(#{share := Share}) -> Share =/= undefined end, deadline(50)),
    #{per_event_ns := Ns, share := Share, events_per_s := Rate, vm_cpu := Vm,
      sink_cpu := Sink, sample := Sample, lowered := false, max_overhead := undefined} = O,
    ?assert(is_integer(Ns) andalso Ns > 0),
    ?assert(is_float(Share) andalso Share >= 0 andalso Share =< 1),
    ?assert(Rate > 0),
    %% The VM's part is the events times the calibrated cost.
    ?assert(abs(Vm - Rate * Ns / 1.0e9) =< 1.0e-9 * Rate * Ns),
    ?assert(Sink =:= undefined orelse Sink >= 0),
    ?assertEqual(1.0, Sample),
    ok = kprof:stop_tiers(),
    ?assertMatch(#{tiers_overhead := undefined}, kprof:status()).

max_overhead_lowers() ->
    %% A bound no tracing meets: the first decision lowers the sample.
    ok = kprof:start_tiers(?TIERS, #{max_overhead => 1.0e-6}),
    O = until(fun(#{lowered := L}) -> L end, deadline(100)),
    #{sample := Sample, lowered := true, max_overhead := 1.0e-6, share := Share} = O,
    ?assert(Sample < 1.0),
    ?assert(Share > 1.0e-6),
    %% Requests are sampled at the lowered fraction from then on.
    {ok, #{seen := Seen0, sampled := Sampled0}} = kprof:report(#{format => term}),
    ?W:run_requests(2000, y, fun() -> ok end),
    {ok, R = #{seen := Seen1, sampled := Sampled1, overhead := [Node]}} =
        kprof:report(#{format => term}),
    ?assertEqual(2000, Seen1 - Seen0),
    ?assert(Sampled1 - Sampled0 < 2000),
    ?assertMatch(#{node := _, max_overhead := 1.0e-6, lowered := true}, Node),
    {ok, Text} = kprof:report(#{format => string}),
    [Header | _] = string:split(Text, "\n"),
    ?assertMatch({match, _}, re:run(Header, "; max_overhead [^:]+: sample [0-9.]+ \\(lowered\\), "
                                    "tracing [0-9.]+ % of the CPU")),
    ?assertEqual(1, length(maps:get(nodes, R))).
