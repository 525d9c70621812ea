%%% @doc kprof_hist against the layout of doc/internals-tiers.md, against the test
%%% vectors the sink's C suite reads too (test/data/hist_vectors.txt), and
%%% against the sink itself: its histograms read and merged in Erlang.
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
    #{count := 800, total := Total, min := Min, max := Max} = kprof_hist:merge(HA, HB),
    ?assertEqual({lists:sum(A ++ B), lists:min(A ++ B), lists:max(A ++ B)}, {Total, Min, Max}).

%% Within 1/64 of the true quantile (doc/internals-tiers.md), exact at 0 and 1.
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

%%% The vectors test/c/test_tiers.c checks the sink's ks_hist.c against

-spec shared_vectors_test() -> term().
shared_vectors_test() ->
    Source = proplists:get_value(source, ?MODULE:module_info(compile)),
    Root = filename:dirname(filename:dirname(filename:dirname(Source))),
    {ok, Bin} = file:read_file(filename:join([Root, "test", "data", "hist_vectors.txt"])),
    Lines = [string:lexemes(L, " ") || L <- string:lexemes(binary_to_list(Bin), "\n")],
    Buckets = [[list_to_integer(W) || W <- Ws] || ["bucket" | Ws] <- Lines],
    [?assertEqual({V, B, Lo, Hi}, {V, kprof_hist:bucket(V), kprof_hist:bucket_low(B),
                                   kprof_hist:bucket_high(B)})
     || [V, B, Lo, Hi] <- Buckets],
    Hists = [hist_vector(Ws) || ["hist" | Ws] <- Lines],
    ?assert(length(Buckets) >= 10 andalso length(Hists) >= 5).

%% `V... [| V...] : Q=X...': the two parts merged, each quantile checked.
hist_vector(Words) ->
    {Values, [":" | Expected]} = lists:splitwith(fun(W) -> W =/= ":" end, Words),
    {A, B} = lists:splitwith(fun(W) -> W =/= "|" end, Values),
    Ints = fun(Ws) -> [list_to_integer(W) || W <- Ws, W =/= "|"] end,
    H = kprof_hist:merge(kprof_hist:from_values(Ints(A)), kprof_hist:from_values(Ints(B))),
    [begin
         [Q, X] = string:split(E, "="),
         Qn = case string:to_float(Q) of {F, []} -> F; _ -> list_to_integer(Q) end,
         ?assertEqual({Values, Q, list_to_integer(X)}, {Values, Q, kprof_hist:quantile(H, Qn)})
     end || E <- Expected],
    H.

%%% Against the sink

%% Requests of varied length on one node: every histogram of the sink's
%% report is one kprof_hist reads (its buckets add up to its count, its
%% quantiles lie between its min and max), and merges exactly.
-spec sink_agrees_test_() -> term().
sink_agrees_test_() ->
    {setup,
     fun() ->
             logger:set_handler_config(default, level, error),
             ok = kprof_test_util:start(#{}),
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
    %% The guard's stall and lag bounds out of reach: they are its own tests'
    %% subject, and an abort on a loaded machine (seen on OTP 27 in a make
    %% test: 104 requests of 600, tracing off) would leave nothing to compare.
    ok = kprof:start_tiers([{a, [{?W, burn_a, 1}]}, {b, [{?W, sleep_b, 1}]}],
                           #{slow_ms => 0, slow_max => 5,
                             max_stall_ms => 60000, max_lag_ms => 60000}),
    rand:seed(exsss, {10, 11, 12}),
    [kprof:request(I rem 3, fun() ->
                                   ?W:burn_a(rand:uniform(300)),
                                   (I rem 7 =:= 0) andalso ?W:sleep_b(1)
                           end) || I <- lists:seq(1, 600)],
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    %% (Tracing still on, or the tiers' status says what ended it.)
    ?assertMatch({#{active := true}, _}, {kprof_tiers:info(), kprof:status()}),
    #{rows := Rows, requests := 600} = kprof_sink:command({tiers_report, true}),
    Hists = [H || #{tiers := Cols, other := O, wall := W} <- Rows,
                  H <- [O, W | [H1 || #{self := S, inclusive := I} <- Cols, H1 <- [S, I]]]],
    ?assertEqual(3 * (2 * 2 + 2), length(Hists)),
    [begin
         #{count := Count, min := Min, max := Max, buckets := Buckets} = H,
         ?assertEqual(Count, lists:sum([N || {_, N} <- Buckets])),
         [?assert(Min =< Q andalso Q =< Max) || Q <- kprof_hist:quantiles(H)]
     end || H <- Hists],
    %% And a merge of two of them reads like a histogram of both.
    [#{tiers := [#{self := S0} | _]}, #{tiers := [#{self := S1} | _]} | _] = Rows,
    #{count := C01, buckets := B01} = kprof_hist:merge(S0, S1),
    ?assertEqual(C01, lists:sum([N || {_, N} <- B01])),
    ?assertEqual(C01, kprof_hist:count(S0) + kprof_hist:count(S1)),
    %% Non-trivial: the burn column saw many distinct buckets.
    [#{tiers := [#{self := #{buckets := BurnBuckets}} | _]} | _] = Rows,
    ?assert(length(BurnBuckets) > 20).
