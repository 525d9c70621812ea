%%% @doc A known call tree for the full-trace tests (kprof_full_trace_tests):
%%% per request, `run/1' calls `top/1' (body), which calls `body/1' (body),
%%% which calls `leaf/1' (body, sleeps 1 ms), then tail-calls `tail/1',
%%% which tail-calls `rec(3)' (body recursion down to `rec(0)', which
%%% sleeps 1 ms); then `run/1' asks this module's gen_server, whose
%%% `handle_call/3' calls `work/1' (sleeps 5 ms) in the server's process.
-module(kprof_full_trace_work).
-behaviour(gen_server).

-export([run/1, top/1, body/1, leaf/1, tail/1, rec/1]).
-export([start/0, stop/1]).
-export([init/1, handle_call/3, handle_cast/2, work/1]).

-spec run(pid()) -> {non_neg_integer(), ok}.
run(Srv) ->
    R = top(3),
    Reply = gen_server:call(Srv, work),
    {R, Reply}.

-spec top(non_neg_integer()) -> non_neg_integer().
top(N) ->
    A = body(N),
    true = is_integer(A),
    tail(N).

-spec body(non_neg_integer()) -> non_neg_integer().
body(N) ->
    leaf(N) + 1.

-spec leaf(non_neg_integer()) -> non_neg_integer().
leaf(N) ->
    timer:sleep(1),
    N * 2.

-spec tail(non_neg_integer()) -> non_neg_integer().
tail(N) ->
    rec(N).

-spec rec(non_neg_integer()) -> non_neg_integer().
rec(0) ->
    timer:sleep(1),
    0;
rec(N) ->
    1 + rec(N - 1).

-spec work(non_neg_integer()) -> ok.
work(Ms) ->
    timer:sleep(Ms),   % a body call: work/1 stays on the stack
    ok.

-spec start() -> pid().
start() ->
    {ok, Pid} = gen_server:start(?MODULE, [], []),
    Pid.

-spec stop(pid()) -> ok.
stop(Pid) ->
    gen_server:stop(Pid).

-spec init([]) -> {ok, []}.
init([]) ->
    {ok, []}.

-spec handle_call(work, gen_server:from(), []) -> {reply, ok, []}.
handle_call(work, _From, S) ->
    {reply, work(5), S}.

-spec handle_cast(term(), []) -> {noreply, []}.
handle_cast(_Msg, S) ->
    {noreply, S}.
