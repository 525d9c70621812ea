%%% @doc kprof_hist against the layout of doc/tiers.md, and against the
%%% sink itself: quantiles read in Erlang from a sink histogram's buckets
%%% are the ones the sink reported.
-module(kprof_hist_tests).

-include_lib("eunit/include/eunit.hrl").

-define(W, kprof_tiers_work).

%%% The layout

-spec layout_test() -> term().
layout_test() ->
    [?assertEqual(V, kprof_hist:bucket(V)) || V <- lists:seq(0, 63)],
    ?assertEqual(64, kprof_hist:bucket(64)),
    ?assertEqual(64, kprof_hist:bucket(65)),
    ?assertEqual(65, kprof_hist:bucket(66)),
    ?assertEqual(95, kprof_hist:bucket(127)),
    ?assertEqual(96, kprof_hist:bucket(128)),
    ?assertEqual({64, 65}, {kprof_hist:bucket_low(64), kprof_hist:bucket_high(64)}),
    ?assertEqual({128, 131}, {kprof_hist:bucket_low(96), kprof_hist:bucket_high(96)}),
    Last = kprof_hist:buckets() - 1,
    ?assertEqual(Last, kprof_hist:bucket(1 bsl 64 - 1)),
    ?assertEqual(1 bsl 64 - 1, kprof_hist:bucket_high(Last)).

%% Buckets tile the integers: each starts where the previous ends.
-spec contiguous_test() -> term().
contiguous_test() ->
    [?assertEqual({B, kprof_hist:bucket_high(B) + 1}, {B, kprof_hist:bucket_low(B + 1)})
     || B <- lists:seq(0, kprof_hist:buckets() - 2)].

-spec bucket_bounds_test() -> term().
bucket_bounds_test() ->
    rand:seed(exsss, {1, 2, 3}),
    [begin
         V = rand:uniform(1 bsl rand:uniform(63)),
         B = kprof_hist:bucket(V),
         ?assert(kprof_hist:bucket_low(B) =< V andalso V =< kprof_hist:bucket_high(B))
     end || _ <- lists:seq(1, 20000)].

-spec merge_exact_test() -> term().
merge_exact_test() ->
    rand:seed(exsss, {4, 5, 6}),
    A = [rand:uniform(10000000) || _ <- lists:seq(1, 500)],
    B = [rand:uniform(100000) || _ <- lists:seq(1, 300)],
    HA = kprof_hist:from_values(A),
    HB = kprof_hist:from_values(B),
    ?assertEqual(kprof_hist:from_values(A ++ B), kprof_hist:merge(HA, HB)),
    ?assertEqual(kprof_hist:merge(HA, HB), kprof_hist:merge(HB, HA)),
    ?assertEqual(HA, kprof_hist:merge(HA, kprof_hist:empty())),
    ?assertEqual(kprof_hist:from_values(A ++ B ++ A),
                 kprof_hist:merge_all([HA, HB, HA])),
    {800, Total, Min, Max, _, _} = kprof_hist:merge(HA, HB),
    ?assertEqual({lists:sum(A ++ B), lists:min(A ++ B), lists:max(A ++ B)}, {Total, Min, Max}).

%% Within 1/64 of the true quantile (doc/tiers.md), exact at 0 and 1.
-spec quantile_error_test() -> term().
quantile_error_test() ->
    rand:seed(exsss, {7, 8, 9}),
    Values = lists:sort([1000 + rand:uniform(50000000) || _ <- lists:seq(1, 2000)]),
    H = kprof_hist:from_values(Values),
    N = length(Values),
    [begin
         True = lists:nth(max(1, trunc(Q * N + 0.5)), Values),
         Got = kprof_hist:quantile(H, Q),
         ?assert(abs(Got - True) =< True / 64 + 1, {Q, True, Got})
     end || Q <- [0.01, 0.1, 0.5, 0.9, 0.99, 0.999]],
    ?assertEqual(hd(Values), kprof_hist:quantile(H, 0)),
    ?assertEqual(lists:last(Values), kprof_hist:quantile(H, 1)),
    ?assertEqual(0, kprof_hist:quantile(kprof_hist:empty(), 0.5)),
    ?assertEqual(0.0, kprof_hist:mean(kprof_hist:empty())).

%%% Against the sink

%% Requests of varied length on one node: every histogram of the sink's
%% report, read again by kprof_hist, gives the sink's own quantiles, and
%% its buckets add up to its count.
-spec sink_agrees_test_() -> term().
sink_agrees_test_() ->
    {setup,
     fun() ->
             logger:set_handler_config(default, level, error),
             ok = kprof:start(#{}),
             ?W:start_times()
     end,
     fun(Times) ->
             _ = kprof:stop_tiers(),
             ok = kprof:stop(),
             ?W:stop_times(Times),
             logger:set_handler_config(default, level, all)
     end,
     {timeout, 60, fun sink_agrees/0}}.

-spec sink_agrees() -> term().
sink_agrees() ->
    ok = kprof:start_tiers([{a, [{?W, burn_a, 1}]}, {b, [{?W, sleep_b, 1}]}],
                           #{slow_ms => 0, slow_max => 5}),
    rand:seed(exsss, {10, 11, 12}),
    [kprof:request(I rem 3, fun() ->
                                   ?W:burn_a(rand:uniform(300)),
                                   (I rem 7 =:= 0) andalso ?W:sleep_b(1)
                           end) || I <- lists:seq(1, 600)],
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    #{rows := Rows, requests := 600} = kprof_sink:command({tiers_report, true}),
    Hists = [H || {_, _, Cols} <- Rows, {_, Self, Incl} <- Cols, H <- [Self, Incl]],
    ?assertEqual(3 * 4 * 2, length(Hists)),
    [begin
         {Count, _, _, _, Qs, Buckets} = H,
         ?assertEqual(Count, lists:sum([N || {_, N} <- Buckets])),
         ?assertEqual(Qs, kprof_hist:quantiles(H))
     end || H <- Hists],
    %% And a merge of two of them reads like a histogram of both.
    [{_, _, [{_, S0, _} | _]}, {_, _, [{_, S1, _} | _]} | _] = Rows,
    {C01, _, _, _, Q01, B01} = kprof_hist:merge(S0, S1),
    ?assertEqual(C01, lists:sum([N || {_, N} <- B01])),
    ?assertEqual(C01, element(1, S0) + element(1, S1)),
    ?assertEqual(4, length(Q01)),
    %% Non-trivial: the burn column saw many distinct buckets.
    [{_, _, [{_, BurnSelf, _} | _]} | _] = Rows,
    ?assert(length(element(6, BurnSelf)) > 20).
