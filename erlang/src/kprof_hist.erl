%%% @doc The sink's latency histograms, read and merged in Erlang.
%%%
%%% The sink reports every histogram as
%%% `{Count, Total, Min, Max, [P50, P90, P99, P999], [{Bucket, N}]}'
%%% (nanoseconds, buckets sparse and ascending). The bucket layout is fixed
%%% (`port/core/ks_hist.h', doc/tiers.md), so histograms of different windows
%%% and different nodes merge exactly by adding bucket counts; the
%%% quantiles of a merge are then read from the merged buckets exactly the
%%% way the sink reads them:
%%%
%%% <ul>
%%% <li>values below 64 ns have a bucket each;</li>
%%% <li>bucket `B >= 64' covers `[Low, Low + 2^(O+1) - 1]' with
%%%     `O = (B - 64) div 32' and `Low = (32 + (B - 64) rem 32) bsl (O + 1)';</li>
%%% <li>quantile `Q' is read at rank `max(1, trunc(Q * Count + 0.5))': the
%%%     first bucket whose running count reaches the rank, at its midpoint,
%%%     clamped to `[Min, Max]' (`Q = 0' is `Min', `Q = 1' is `Max').</li>
%%% </ul>
%%%
%%% ```
%%% 1> H = kprof_hist:from_values([100, 200, 300, 5000]).
%%% {4,5600,100,5000,[201,5000,5000,5000],[{82,1},{114,1},{133,1},{263,1}]}
%%% 2> kprof_hist:quantile(kprof_hist:merge(H, H), 0.5).
%%% 201
%%% '''
-module(kprof_hist).

-export([empty/0, from_values/1, record/2, merge/2, merge_all/1,
         quantile/2, quantiles/1, mean/1, count/1,
         bucket/1, bucket_low/1, bucket_high/1, buckets/0]).

-export_type([hist/0]).

-define(LINEAR, 64).
-define(SUB, 32).
-define(BUCKETS, (?LINEAR + (63 - 6 + 1) * ?SUB)).
%% The quantiles the sink reports, in its order.
-define(QS, [0.5, 0.9, 0.99, 0.999]).

-type hist() :: {Count :: non_neg_integer(), Total :: non_neg_integer(),
                 Min :: non_neg_integer(), Max :: non_neg_integer(),
                 Quantiles :: [non_neg_integer()],
                 Buckets :: [{non_neg_integer(), pos_integer()}]}.

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc The histogram of nothing, as the sink writes it.
-spec empty() -> hist().
empty() ->
    {0, 0, 0, 0, [0, 0, 0, 0], []}.

%% @doc The histogram of these values (nanoseconds), as the sink would
%% record them.
-spec from_values([non_neg_integer()]) -> hist().
from_values(Values) ->
    lists:foldl(fun(V, H) -> record(H, V) end, empty(), Values).

%% @doc Adds one value.
-spec record(hist(), non_neg_integer()) -> hist().
record(H, V) when is_integer(V), V >= 0 ->
    merge(H, {1, V, V, V, [V, V, V, V], [{bucket(V), 1}]}).

%% @doc The exact merge of two histograms: counts, totals and buckets
%% added, quantiles read again from the merged buckets.
-spec merge(hist(), hist()) -> hist().
merge({0, _, _, _, _, _}, H) ->
    H;
merge(H, {0, _, _, _, _, _}) ->
    H;
merge({C1, T1, Min1, Max1, _, B1}, {C2, T2, Min2, Max2, _, B2}) ->
    with_quantiles({C1 + C2, T1 + T2, min(Min1, Min2), max(Max1, Max2), [],
                    merge_buckets(B1, B2)}).

%% @doc The merge of a list of histograms (empty: {@link empty/0}).
-spec merge_all([hist()]) -> hist().
merge_all(Hists) ->
    lists:foldl(fun(H, Acc) -> merge(Acc, H) end, empty(), Hists).

%% @doc The value at quantile `Q' (0..1), in nanoseconds, read as the sink
%% reads it (within 1/64 of the true value above 64 ns).
-spec quantile(hist(), number()) -> non_neg_integer().
quantile({0, _, _, _, _, _}, _Q) ->
    0;
quantile({_, _, Min, _, _, _}, Q) when Q =< 0 ->
    Min;
quantile({_, _, _, Max, _, _}, Q) when Q >= 1 ->
    Max;
quantile({Count, _, Min, Max, _, Buckets}, Q) ->
    Rank = max(1, trunc(Q * Count + 0.5)),
    case find_rank(Buckets, Rank, 0) of
        {ok, B} ->
            Low = bucket_low(B),
            Mid = Low + (bucket_high(B) - Low) div 2,
            min(Max, max(Min, Mid));
        error ->
            Max
    end.

%% @doc `[P50, P90, P99, P999]' from the buckets: what the sink reports
%% for the same histogram.
-spec quantiles(hist()) -> [non_neg_integer()].
quantiles(H) ->
    [quantile(H, Q) || Q <- ?QS].

%% @doc The mean in nanoseconds (0.0 when empty).
-spec mean(hist()) -> float().
mean({0, _, _, _, _, _}) -> 0.0;
mean({Count, Total, _, _, _, _}) -> Total / Count.

%% @doc The number of values recorded.
-spec count(hist()) -> non_neg_integer().
count({Count, _, _, _, _, _}) -> Count.

%%% The layout

%% @doc The bucket of a value (nanoseconds).
-spec bucket(non_neg_integer()) -> non_neg_integer().
bucket(V) when V < ?LINEAR ->
    V;
bucket(V) ->
    Msb = msb(V),
    Shift = Msb - 5,
    ?LINEAR + (Msb - 6) * ?SUB + ((V bsr Shift) - ?SUB).

%% @doc The smallest value of a bucket.
-spec bucket_low(non_neg_integer()) -> non_neg_integer().
bucket_low(B) when B < ?LINEAR ->
    B;
bucket_low(B) ->
    Octave = (B - ?LINEAR) div ?SUB,
    (?SUB + (B - ?LINEAR) rem ?SUB) bsl (Octave + 1).

%% @doc The largest value of a bucket (inclusive).
-spec bucket_high(non_neg_integer()) -> non_neg_integer().
bucket_high(B) when B < ?LINEAR ->
    B;
bucket_high(B) ->
    bucket_low(B) + (1 bsl ((B - ?LINEAR) div ?SUB + 1)) - 1.

%% @doc The number of buckets of the layout.
-spec buckets() -> pos_integer().
buckets() ->
    ?BUCKETS.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec with_quantiles(hist()) -> hist().
with_quantiles({C, T, Min, Max, _, B}) ->
    H = {C, T, Min, Max, [], B},
    {C, T, Min, Max, quantiles(H), B}.

-spec merge_buckets([{non_neg_integer(), pos_integer()}],
                    [{non_neg_integer(), pos_integer()}]) ->
          [{non_neg_integer(), pos_integer()}].
merge_buckets([], Bs) -> Bs;
merge_buckets(Bs, []) -> Bs;
merge_buckets([{B, N} | R1], [{B, M} | R2]) -> [{B, N + M} | merge_buckets(R1, R2)];
merge_buckets([{B1, _} = X | R1], [{B2, _} | _] = L2) when B1 < B2 -> [X | merge_buckets(R1, L2)];
merge_buckets(L1, [Y | R2]) -> [Y | merge_buckets(L1, R2)].

-spec find_rank([{non_neg_integer(), pos_integer()}], pos_integer(), non_neg_integer()) ->
          {ok, non_neg_integer()} | error.
find_rank([], _Rank, _Seen) ->
    error;
find_rank([{B, N} | Rest], Rank, Seen) ->
    case Seen + N >= Rank of
        true -> {ok, B};
        false -> find_rank(Rest, Rank, Seen + N)
    end.

%% The index of the highest set bit.
-spec msb(pos_integer()) -> non_neg_integer().
msb(V) ->
    msb(V, 0).

-spec msb(pos_integer(), non_neg_integer()) -> non_neg_integer().
msb(1, N) -> N;
msb(V, N) -> msb(V bsr 1, N + 1).
