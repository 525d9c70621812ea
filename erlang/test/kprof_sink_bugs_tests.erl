%%% @doc Reproduction of a sink (C) problem found while building the
%%% Erlang side of tiers. It fails until the sink is fixed, so it only
%%% runs with `KPROF_SINK_BUGS=1 make eunit'. (The other one, killed
%%% request processes holding their in-flight slots, is fixed: its test is
%%% `killed' in kprof_tiers_tests.)
%%%
%%% A `return_to' message has no label: the sink gives it to the
%%% request of the process's last labelled call. After a request nested
%%% in another ends, the outer request's returns count for the inner
%%% one until the process makes a labelled call again, so the outer
%%% tier frame stays open and swallows what comes after. kprof_tiers
%%% works around it with the resume marker (kprof_mark:resume/0); the
%%% test removes that marker's pattern to show the sink alone.
-module(kprof_sink_bugs_tests).

-include_lib("eunit/include/eunit.hrl").

-define(W, kprof_tiers_work).

-spec sink_bugs_test_() -> term().
sink_bugs_test_() ->
    case os:getenv("KPROF_SINK_BUGS") of
        false ->
            [];
        _ ->
            {foreach, fun setup/0, fun cleanup/1,
             [{"returns after a nested request go to the inner request", fun nested/0}]}
    end.

-spec nested() -> term().
nested() ->
    ok = kprof:start_tiers([{a, [{?W, nest, 1}]}, {b, [{?W, sleep_b, 1}]}], #{}),
    erlang:trace_pattern({kprof_mark, resume, 0}, false, [local]),
    ?W:run_requests(10, outer, fun() -> ?W:nest(2), timer:sleep(5) end),
    ok = ?W:settle(),
    {ok, #{rows := Rows}} = kprof:report(#{format => term}),
    [#{tiers := [#{self := #{mean := A}} | _], other := #{mean := Other}}] =
        [R || #{identity := outer} = R <- Rows],
    %% Today: nest/1 gets the 5 ms sleep after it (A about 8, Other about 0).
    ?assert(Other >= 5.0),
    ?assert(A < 5.0).

-spec setup() -> pid().
setup() ->
    logger:set_handler_config(default, level, error),
    ok = kprof:start(#{}),
    ?W:start_times().

-spec cleanup(pid()) -> ok.
cleanup(Times) ->
    _ = kprof:stop_tiers(),
    ok = kprof:stop(),
    ?W:stop_times(Times),
    logger:set_handler_config(default, level, all),
    ok.
