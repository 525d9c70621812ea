%%% The shortest kprof session: trace a few thousand calls of a small call
%%% tree through the sink, then print what the sink counted.
%%% (`make demo' runs the three-tier example, examples/shop, instead.)
-module(kprof_demo_basic).
-export([main/0, tree/1]).

%% A small recursive call tree: tree(N) calls tree(N-1) twice.
tree(0) -> 1;
tree(N) -> tree(N - 1) + tree(N - 1).

main() ->
    ok = kprof:start(),
    Port = kprof:sink_port(),
    Self = self(),
    Pid = spawn(fun() -> receive go -> ok end, Self ! {done, tree(12)} end),
    1 = erlang:trace_pattern({?MODULE, tree, 1}, [{'_', [], [{return_trace}]}], [local]),
    1 = erlang:trace(Pid, true, [call, arity, return_to, running, procs,
                                 monotonic_timestamp, {tracer, Port}]),
    T0 = erlang:monotonic_time(microsecond),
    Pid ! go,
    receive {done, _} -> ok end,
    T1 = erlang:monotonic_time(microsecond),
    erlang:trace_pattern({?MODULE, tree, 1}, false, [local]),
    {synced, Frames} = kprof:sink_sync(),
    Stats = kprof:sink_stats(),
    Events = maps:filter(fun(_, V) -> V > 0 end, maps:get(events, Stats)),
    io:format("kprof demo: traced ~b calls of ~p:tree/1 in ~.1f ms~n",
              [calls(), ?MODULE, (T1 - T0) / 1000]),
    io:format("sink: ~b frames, ~b bytes, ~b decode errors, ~b dropped~n",
              [Frames, maps:get(bytes, Stats), maps:get(decode_errors, Stats),
               maps:get(dropped, Stats)]),
    io:format("events by kind:~n"),
    [io:format("  ~-16s ~b~n", [K, V]) || {K, V} <- lists:sort(maps:to_list(Events))],
    io:format("calls per function:~n"),
    [io:format("  ~p:~p/~b ~b~n", [M, F, A, N]) || {{M, F, A}, N} <- kprof:sink_calls()],
    kprof:stop().

calls() ->
    lists:sum([N || {_, N} <- kprof:sink_calls()]).
