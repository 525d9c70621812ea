%%% @doc The sink's latency histograms, read and merged in Erlang.
%%%
%%% The sink reports every histogram as
%%% `#{count, total, min, max, buckets => [{Bucket, N}]}' (nanoseconds, or a
%%% count; buckets sparse and ascending). The bucket layout is fixed
%%% (`port/core/ks_hist.h', doc/internals-tiers.md), so histograms of different windows
%%% and different nodes merge exactly by adding bucket counts; quantiles are
%%% read here, from the merged buckets, exactly the way the sink's
%%% `ks_hist_quantile' reads them (test/data/hist_vectors.txt holds cases
%%% both suites check):
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
%%% #{buckets => [{82,1},{114,1},{133,1},{263,1}],count => 4,max => 5000,
%%%   min => 100,total => 5600}
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
%% The quantiles of quantiles/1, the report's p50, p90, p99 and p999.
-define(QS, [0.5, 0.9, 0.99, 0.999]).

-type hist() :: #{count := non_neg_integer(), total := non_neg_integer(),
                  min := non_neg_integer(), max := non_neg_integer(),
                  buckets := [{non_neg_integer(), pos_integer()}]}.

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc The histogram of nothing, as the sink writes it.
-spec empty() -> hist().
empty() ->
    #{count => 0, total => 0, min => 0, max => 0, buckets => []}.

%% @doc The histogram of these values (nanoseconds), as the sink would
%% record them.
-spec from_values([non_neg_integer()]) -> hist().
from_values(Values) ->
    lists:foldl(fun(V, H) -> record(H, V) end, empty(), Values).

%% @doc Adds one value.
-spec record(hist(), non_neg_integer()) -> hist().
record(H, V) when is_integer(V), V >= 0 ->
    merge(H, #{count => 1, total => V, min => V, max => V, buckets => [{bucket(V), 1}]}).

%% @doc The exact merge of two histograms: counts, totals and buckets
%% added.
-spec merge(hist(), hist()) -> hist().
merge(#{count := 0}, H) ->
    H;
merge(H, #{count := 0}) ->
    H;
merge(#{count := C1, total := T1, min := Min1, max := Max1, buckets := B1},
      #{count := C2, total := T2, min := Min2, max := Max2, buckets := B2}) ->
    #{count => C1 + C2, total => T1 + T2, min => min(Min1, Min2), max => max(Max1, Max2),
      buckets => merge_buckets(B1, B2)}.

%% @doc The merge of a list of histograms (empty: {@link empty/0}).
-spec merge_all([hist()]) -> hist().
merge_all(Hists) ->
    lists:foldl(fun(H, Acc) -> merge(Acc, H) end, empty(), Hists).

%% @doc The value at quantile `Q' (0..1), in nanoseconds, read as the sink
%% reads it (within 1/64 of the true value above 64 ns).
-spec quantile(hist(), number()) -> non_neg_integer().
quantile(#{count := 0}, _Q) ->
    0;
quantile(#{min := Min}, Q) when Q =< 0 ->
    Min;
quantile(#{max := Max}, Q) when Q >= 1 ->
    Max;
quantile(#{count := Count, min := Min, max := Max, buckets := Buckets}, Q) ->
    Rank = max(1, trunc(Q * Count + 0.5)),
    case find_rank(Buckets, Rank, 0) of
        {ok, B} ->
            Low = bucket_low(B),
            Mid = Low + (bucket_high(B) - Low) div 2,
            min(Max, max(Min, Mid));
        error ->
            Max
    end.

%% @doc `[P50, P90, P99, P999]' from the buckets.
-spec quantiles(hist()) -> [non_neg_integer()].
quantiles(H) ->
    [quantile(H, Q) || Q <- ?QS].

%% @doc The mean in nanoseconds (0.0 when empty).
-spec mean(hist()) -> float().
mean(#{count := 0}) -> 0.0;
mean(#{count := Count, total := Total}) -> Total / Count.

%% @doc The number of values recorded.
-spec count(hist()) -> non_neg_integer().
count(#{count := Count}) -> Count.

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
