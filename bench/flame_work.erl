%%% @doc The two workloads of the flame benchmarks' end-to-end rows
%%% (`make bench-flame', bench/flame_bench.erl), kept apart so that anything
%%% that compares flame tools runs the very same code:
%%% <ul>
%%% <li>`fib(N)': naive doubly-recursive Fibonacci, deep and narrow (fib(25):
%%%     242,785 calls, each with a return_to: ~485 k events);</li>
%%% <li>`wide(N)': N iterations of a few lists, maps and ets calls on a small
%%%     table, shallow and wide (many functions, stdlib and BIFs).</li>
%%% </ul>
%%% Both are deterministic: the same calls in the same order on every run.
-module(flame_work).

-export([fib/1, wide/1]).

%% @doc Naive Fibonacci: both recursive calls are body calls, so every call
%% returns to a traced function.
-spec fib(non_neg_integer()) -> non_neg_integer().
fib(N) when N < 2 -> N;
fib(N) -> fib(N - 1) + fib(N - 2).

-define(KEYS, 32).

%% @doc `N' iterations over a table of ?KEYS keys and a map of the same
%% keys; returns a checksum.
-spec wide(non_neg_integer()) -> integer().
wide(N) ->
    T = ets:new(?MODULE, [set, private]),
    true = ets:insert(T, [{K, K} || K <- lists:seq(1, ?KEYS)]),
    Sum = wide(N, T, maps:from_list([{K, 0} || K <- lists:seq(1, ?KEYS)]), 0),
    true = ets:delete(T),
    Sum.

wide(0, _T, M, Acc) ->
    Acc + lists:sum(maps:values(M));
wide(I, T, M, Acc) ->
    K = I rem ?KEYS + 1,
    L = lists:seq(K, K + 3),
    [{K, V}] = ets:lookup(T, K),
    true = ets:insert(T, {K, V + lists:sum(L)}),
    M1 = maps:put(K, V, M),
    Found = case lists:keyfind(K, 1, ets:lookup(T, K)) of
                {K, X} -> X;
                false -> 0
            end,
    [Last | _] = lists:reverse(L),
    wide(I - 1, T, M1, Acc + Found + Last + maps:get(K, M1) + map_size(M1)).
