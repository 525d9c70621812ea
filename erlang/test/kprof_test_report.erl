%%% @doc Helpers of the EUnit suites that read the tier report: the report
%%% once every trace message sent so far has reached the sink, an identity's
%%% row, a tier's calls and mean self time (ms) in a row.
-module(kprof_test_report).

-export([report/0, row/2, calls/2, self_mean/2]).

-spec report() -> map().
report() ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    {ok, R} = kprof:report(#{format => term}),
    R.

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
