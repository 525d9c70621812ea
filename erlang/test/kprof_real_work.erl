%%% @doc Real OTP workloads for the comparison bench (bench/real_bench.erl)
%%% and the real-workload EUnit suite (erlang/test/kprof_real_tests.erl):
%%% each is made of OTP's own code, not of loops written for a profiler.
%%%
%%% ```
%%%  compile   compile:file/2 of a module (default erlang/src/kprof_tiers.erl,
%%%            in memory: [binary]); about 6 M calls, recursion past 256 frames
%%%  xmerl     xmerl_scan:string/1 of a catalogue of N items (a scanner in
%%%            continuation-passing style, deep and narrow)
%%%  digraph   digraph_utils on a graph of N vertices and 3N edges: strong
%%%            components, reachability both ways (ets lookups, wide and
%%%            shallow)
%%% '''
%%% `input/2' makes what a workload reads (the document, the graph) before
%%% anything is traced; `run/1' is the call to profile.
-module(kprof_real_work).
-export([input/2, run/1, default_size/1, names/0, label/2]).

-type name() :: compile | xmerl | digraph.
-export_type([name/0]).

%% @doc The workloads, in the order the bench runs them.
-spec names() -> [name()].
names() -> [compile, xmerl, digraph].

%% @doc The size each workload has by default: the module to compile, the
%% items of the document, the vertices of the graph.
-spec default_size(name()) -> string() | pos_integer().
default_size(compile) -> "erlang/src/kprof_tiers.erl";
default_size(xmerl) -> 4000;
default_size(digraph) -> 20000.

%% @doc How a row names the workload.
-spec label(name(), string() | pos_integer()) -> string().
label(compile, File) -> lists:flatten(io_lib:format("compile:file(~s)", [filename:basename(File)]));
label(xmerl, N) -> lists:flatten(io_lib:format("xmerl_scan:string(~b items)", [N]));
label(digraph, N) -> lists:flatten(io_lib:format("digraph_utils(~b vertices)", [N])).

%% @doc What the workload works on, made untraced. `Size' as default_size/1
%% gives it (a file for compile, relative to the current directory).
-spec input(name(), string() | pos_integer()) -> {name(), term()}.
input(compile, File) ->
    %% The include directory beside the sources (erlang/src, erlang/include),
    %% and those kprof was compiled with: rebar3's build reaches the sources
    %% through _build/*/lib/kprof/src, beside another include directory.
    Built = proplists:get_value(options, kprof:module_info(compile), []),
    Inc = [filename:join(filename:dirname(filename:dirname(File)), "include")
           | [D || {i, D} <- Built]],
    {compile, {File, [binary, return_errors | [{i, D} || D <- Inc]]}};
input(xmerl, N) ->
    {xmerl, document(N)};
input(digraph, N) ->
    {digraph, graph(N)}.

%% @doc The call to profile. Returns something small that depends on all of
%% the work (so nothing is optimised away, and a test can check it).
-spec run({name(), term()}) -> term().
run({compile, {File, Opts}}) ->
    {ok, Mod, Bin} = compile:file(File, Opts),
    {Mod, byte_size(Bin)};
run({xmerl, Doc}) ->
    {Root, []} = xmerl_scan:string(Doc, [{quiet, true}]),
    length(element(9, Root));   % #xmlElement.content
run({digraph, G}) ->
    Comps = digraph_utils:strong_components(G),
    Reach = digraph_utils:reachable([1], G),
    Back = digraph_utils:reaching([digraph:no_vertices(G)], G),
    {length(Comps), length(Reach), length(Back)}.

%% A catalogue of N items, each with attributes, text and a nested element.
-spec document(pos_integer()) -> string().
document(N) ->
    Items = [io_lib:format("  <item id=\"i~b\" kind=\"~s\">\n"
                           "    <name>Item number ~b</name>\n"
                           "    <price currency=\"EUR\">~b.~2..0b</price>\n"
                           "    <tags><tag>t~b</tag><tag>t~b</tag></tags>\n"
                           "  </item>\n",
                           [I, kind(I), I, I * 7 rem 1000, I rem 100, I rem 13, I rem 17])
             || I <- lists:seq(1, N)],
    lists:flatten(["<?xml version=\"1.0\"?>\n<catalog>\n", Items, "</catalog>\n"]).

kind(I) when I rem 3 =:= 0 -> "book";
kind(I) when I rem 3 =:= 1 -> "disc";
kind(_) -> "tool".

%% N vertices, 3N edges drawn by a fixed seed: most go forward to one of
%% the next 50 vertices, one in 20 back to one of the 10 before, so the
%% graph has strong components of many small sizes and long paths.
-spec graph(pos_integer()) -> digraph:graph().
graph(N) ->
    G = digraph:new(),
    _ = [digraph:add_vertex(G, V) || V <- lists:seq(1, N)],
    S0 = rand:seed_s(exsss, {1, 2, 3}),
    _ = lists:foldl(fun(_, S) ->
                            {A, S1} = rand:uniform_s(N, S),
                            {D, S2} = rand:uniform_s(50, S1),
                            {Back, S3} = rand:uniform_s(20, S2),
                            B = case Back of
                                    1 -> max(1, A - 1 - D rem 10);
                                    _ -> min(N, A + D)
                                end,
                            _ = digraph:add_edge(G, A, B),
                            S3
                    end, S0, lists:seq(1, 3 * N)),
    G.
