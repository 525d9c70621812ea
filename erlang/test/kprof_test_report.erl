%%% @doc Helpers of the EUnit suites that read the tier report: the report
%%% once every trace message sent so far has reached the sink, the sink
%%% answered it within the report's bound, and no request is in flight (a
%%% server's request may end after its client has the response: at a load of
%%% 27, rebar3 eunit's report counted 170 of 200 GET /catalog, the rest
%%% still running); the report's header, to print when a test's rows differ;
%%% an identity's row, a tier's calls and mean self time
%%% (ms) in a row.
-module(kprof_test_report).

-export([report/0, complete/0, header/1, row/2, calls/2, self_mean/2]).

-spec report() -> map().
report() ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    complete().

%% The term report once its sinks answered within the report's bound (2 s
%% each) and no request was in flight: asked again, 20 times at most (100 ms
%% apart while requests end), while one did not.
-spec complete() -> map().
complete() ->
    complete(20).

-spec complete(pos_integer()) -> map().
complete(N) ->
    {ok, R} = kprof:report(#{format => term}),
    case {[I || #{reason := no_answer} = I <- maps:get(incomplete, R)], maps:get(inflight, R)} of
        {[_ | _], _} when N > 1 -> complete(N - 1);
        {[], Inflight} when Inflight > 0, N > 1 -> timer:sleep(100), complete(N - 1);
        _ -> R
    end.

%% The report without its rows: the counts a test prints when its rows are
%% not what it expected (inflight, dropped, incomplete, aborted, ...).
-spec header(map()) -> map().
header(R) ->
    maps:without([rows, all], R).

-spec row(map(), term()) -> map().
row(#{rows := Rows}, Id) ->
    [Row] = [R || #{identity := I} = R <- Rows, I =:= Id],
    Row.

-spec calls(map(), atom()) -> non_neg_integer().
calls(#{tiers := Tiers}, Tier) ->
    [C] = [C || #{tier := T, calls := C} <- Tiers, T =:= Tier],
    C.

-spec self_mean(map(), atom()) -> number().
self_mean(#{tiers := Tiers}, Tier) ->
    [M] = [M || #{tier := T, self := #{mean := M}} <- Tiers, T =:= Tier],
    M.
