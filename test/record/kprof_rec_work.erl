%%% @doc Code traced by {@link kprof_trace_recorder}: nested calls, tail calls,
%%% body and tail recursion, an exception that escapes a function and is
%%% caught by its caller, and calls taking lists and binaries.
%%% Nothing here is meant to be fast or useful.
-module(kprof_rec_work).

-export([run/0, run_args/1, run_tokens/0, await/0]).
-export([outer/1, middle/1, inner/1, tail_a/1, tail_b/1, tail_c/1,
         fac/1, len/1, thrower/1, catcher/1, args/3, echo/1, leaf/0]).

%% @doc The scenario of `calls_ts': every kind of call and return.
-spec run() -> term().
run() ->
    R1 = outer(3),
    R2 = tail_a(2),
    R3 = fac(4),
    R4 = len([a, b, c]),
    R5 = catcher(1),
    R6 = try thrower(error) catch error:Reason -> {'EXIT', Reason} end,
    {R1, R2, R3, R4, R5, R6}.

%% @doc Calls whose arguments are lists and binaries (no `arity' flag).
-spec run_args(binary()) -> term().
run_args(Big) ->
    A = args([1, 2, 3], "text", <<"small">>),
    B = args(lists:seq(1, 300), [{tuple, 1.5}, -7, 1 bsl 70], Big),
    C = echo(self()),
    D = echo([]),
    {A, B, C, D}.

%% @doc Short calls for the match-spec `{message, X}' scenarios.
-spec run_tokens() -> term().
run_tokens() ->
    X = leaf(),
    Y = middle(1),
    Z = echo(X),
    {X, Y, Z}.

%% @doc Spawned as `spawn(kprof_rec_work, await, [])': waits for `go',
%% then tail-calls {@link leaf/0}, whose caller is then `undefined'.
-spec await() -> 1.
await() ->
    receive go -> ok end,
    leaf().

%% @doc outer -> middle -> inner, each a body call.
-spec outer(integer()) -> integer().
outer(N) -> middle(N) + 1.

%% @doc A body call of {@link inner/1}.
-spec middle(integer()) -> integer().
middle(N) -> inner(N) * 2.

%% @doc A leaf.
-spec inner(integer()) -> integer().
inner(N) -> N + leaf().

%% @doc tail_a -> tail_b -> tail_c: a chain of tail calls.
-spec tail_a(integer()) -> integer().
tail_a(N) -> tail_b(N + 1).

%% @doc A tail call.
-spec tail_b(integer()) -> integer().
tail_b(N) -> tail_c(N * 2).

%% @doc The end of the tail chain: a body call, then a return.
-spec tail_c(integer()) -> integer().
tail_c(N) -> inner(N) - 1.

%% @doc Body recursion.
-spec fac(non_neg_integer()) -> pos_integer().
fac(0) -> 1;
fac(N) -> N * fac(N - 1).

%% @doc Tail recursion through an accumulator.
-spec len(list()) -> non_neg_integer().
len(L) -> len(L, 0).

-spec len(list(), non_neg_integer()) -> non_neg_integer().
len([], N) -> N;
len([_ | T], N) -> len(T, N + 1).

%% @doc Raises an exception of class `Class'.
-spec thrower(error | throw | exit) -> no_return().
thrower(error) -> erlang:error(kaboom);
thrower(throw) -> throw(thrown);
thrower(exit) -> exit(gone).

%% @doc Catches what {@link thrower/1} raises.
-spec catcher(integer()) -> {caught, atom(), term()}.
catcher(_) ->
    try thrower(throw)
    catch Class:Reason -> {caught, Class, Reason}
    end.

%% @doc Takes three terms, returns their sizes.
-spec args(term(), term(), term()) -> non_neg_integer().
args(A, B, C) -> erts_debug:flat_size({A, B, C}).

%% @doc Returns its argument.
-spec echo(T) -> T.
echo(X) -> X.

%% @doc Returns 1.
-spec leaf() -> 1.
leaf() -> 1.
