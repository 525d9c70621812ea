%%% @doc Real OTP workloads for the flame benchmarks (`make bench-stacks',
%%% `make bench-flame-real'), and the recorder of their trace streams.
%%%
%%% <ul>
%%% <li>`compile': `compile:file/2' of erlang/src/kprof_tiers.erl (binary, in
%%%     memory): the compiler's passes, ~6 M calls of ~37 ns;</li>
%%% <li>`xmerl': `xmerl_scan:string/1' of a 60 KB XML document made from
%%%     bench/RESULTS.md's text: a scanner's mutual tail recursion;</li>
%%% <li>`digraph': a random digraph of 3000 vertices and 12000 edges, its strong
%%%     components, topological sort and reachability (digraph, digraph_utils:
%%%     ets tables and list recursion).</li>
%%% <li>`server' (stack_quality only): a gen_server answering 3000 calls, each a
%%%     small sort: a server's loop that never returns.</li>
%%% </ul>
%%% `record(Workload, File)' runs one traced with a port tracer into a file
%%% (dbg's file trace port: every event, the VM's own format), with kprof's
%%% flags and the call pattern `[{'_', [], [{message, {caller}}]}]', so the
%%% stream holds both what the flow rules read (calls, return_tos) and the
%%% callers the search rules need: bench/stack_quality.c compares the two.
-module(flame_real).

-export([work/1, workloads/0, record/2, main/1]).
%% The server workload's gen_server.
-export([init/1, handle_call/3, handle_cast/2]).

-define(FLAGS, [call, arity, return_to, running, procs, monotonic_timestamp, set_on_spawn]).

%% @doc The workloads' names.
-spec workloads() -> [atom()].
workloads() ->
    [compile, xmerl, digraph].

%% @doc A workload as a fun of no argument, set up (its input made) now.
-spec work(atom()) -> fun(() -> ok).
work(compile) ->
    Src = filename:absname("erlang/src/kprof_tiers.erl"),
    Inc = filename:absname("erlang/include"),
    fun() -> {ok, _, _} = compile:file(Src, [binary, {i, Inc}]), ok end;
work(xmerl) ->
    {ok, Text} = file:read_file(filename:absname("bench/RESULTS.md")),
    Escaped = lists:foldl(fun({F, T}, B) -> binary:replace(B, F, T, [global]) end, Text,
                          [{<<"&">>, <<"&amp;">>}, {<<"<">>, <<"&lt;">>}, {<<">">>, <<"&gt;">>}]),
    Part = binary:part(Escaped, 0, min(15000, byte_size(Escaped))),
    Xml = binary_to_list(iolist_to_binary(
                           ["<doc>", [["<p n=\"", integer_to_list(I), "\">", Part, "</p>"]
                                      || I <- lists:seq(1, 4)], "</doc>"])),
    fun() -> {_, []} = xmerl_scan:string(Xml), ok end;
work(server) ->
    fun() ->
            {ok, S} = gen_server:start_link(?MODULE, [], []),
            _ = [gen_server:call(S, {sort, I}) || I <- lists:seq(1, 3000)],
            ok = gen_server:stop(S)
    end;
work(digraph) ->
    fun() ->
            rand:seed(exsss, {1, 2, 3}),
            N = 3000,
            G = digraph:new(),
            Vs = [digraph:add_vertex(G, I) || I <- lists:seq(1, N)],
            _ = [digraph:add_edge(G, rand:uniform(N), rand:uniform(N)) || _ <- lists:seq(1, 4 * N)],
            _ = digraph_utils:strong_components(G),
            _ = digraph_utils:topsort(G),
            _ = digraph_utils:reachable(lists:sublist(Vs, 10), G),
            _ = digraph_utils:cyclic_strong_components(G),
            true = digraph:delete(G),
            ok
    end.

%% @doc Records `Workload' traced (see the module doc) into `File'; returns
%% the workload's traced wall time in ms.
-spec record(atom(), file:filename()) -> float().
record(Workload, File) ->
    F = work(Workload),
    F(),
    Self = self(),
    P = spawn(fun() ->
                      receive go -> ok end,
                      T0 = erlang:monotonic_time(microsecond),
                      F(),
                      Self ! {done, self(), erlang:monotonic_time(microsecond) - T0}
              end),
    Port = (dbg:trace_port(file, File))(),
    1 = erlang:trace(P, true, [{tracer, Port} | ?FLAGS]),
    _ = erlang:trace_pattern({'_', '_', '_'}, [{'_', [], [{message, {caller}}]}], [local]),
    P ! go,
    Us = receive {done, P, T} -> T end,
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    true = port_close(Port),
    Us / 1000.

%% @doc `erl -run flame_real main record Workload File ...': records each
%% workload into its file and prints the traced time.
-spec main([string()]) -> no_return().
main(["record" | Pairs]) ->
    rec(Pairs),
    halt(0).

rec([W, File | More]) ->
    Ms = record(list_to_atom(W), File),
    io:format("flame_real: ~s traced in ~.1f ms into ~s (~b bytes)~n",
              [W, Ms, File, filelib:file_size(File)]),
    rec(More);
rec([]) ->
    ok.

%% @private
init([]) -> {ok, #{}}.

%% @private
handle_call({sort, I}, _From, St) -> {reply, lists:sort([I rem 7, I rem 5, I rem 3]), St}.

%% @private
handle_cast(_, St) -> {noreply, St}.
