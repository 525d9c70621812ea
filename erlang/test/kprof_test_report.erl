%%% @doc Helpers of the EUnit suites that read the tier report: the report
%%% once every trace message sent so far has reached the sink (and the sink
%%% answered it within the report's bound), an identity's row, a tier's calls
%%% and mean self time (ms) in a row.
-module(kprof_test_report).

-export([report/0, complete/0, row/2, calls/2, self_mean/2]).

-spec report() -> map().
report() ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    complete().

%% The term report once its sinks answered within the report's bound (2 s
%% each): asked again, 20 times at most, while one did not.
-spec complete() -> map().
complete() ->
    complete(20).

-spec complete(pos_integer()) -> map().
complete(N) ->
    {ok, R} = kprof:report(#{format => term}),
    case [I || #{reason := no_answer} = I <- maps:get(incomplete, R)] of
        [_ | _] when N > 1 -> complete(N - 1);
        _ -> R
    end.

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
