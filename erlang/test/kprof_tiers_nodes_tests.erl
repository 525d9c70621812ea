%%% @doc Tiers on several nodes when one of them goes: a node killed
%%% (`kill -9') while the tiers run is named in the report's `missing' and
%%% the others' rows still merge; `stop_tiers/0' stops the nodes it reaches
%%% and names the one it cannot; a later start leaves the dead node out. A
%%% node without kprof's code is refused by name. Peers are started with
%%% OTP `peer'; this node is made distributed for the test if it is not.
-module(kprof_tiers_nodes_tests).

-include_lib("eunit/include/eunit.hrl").

-define(W, kprof_tiers_work).
-define(TIERS, [{a, [{?W, sleep_a, 1}]}, {b, [{?W, sleep_b, 1}]}]).

-spec nodes_test_() -> term().
nodes_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(#{live := Live, doomed := Doomed, bare := Bare}) ->
             [{"a node killed mid-run: the others reported, it is missing; stop and a new start go on",
               {timeout, 120, fun() -> one_gone(Live, Doomed) end}},
              {"a node without kprof: {kprof_not_loaded, Node}",
               {timeout, 120, fun() -> not_loaded(Bare) end}}]
     end}.

-spec one_gone(node(), node()) -> term().
one_gone(Live, Doomed) ->
    Nodes = [node(), Live, Doomed],
    ok = kprof:start_tiers(?TIERS, #{nodes => Nodes}),
    ?W:run_mfa_requests(3, shared, ?W, sleep_a, [1]),
    [ok = erpc:call(N, ?W, run_mfa_requests, [K, shared, ?W, sleep_a, [1]])
     || {N, K} <- [{Live, 4}, {Doomed, 5}]],
    ok = ?W:settle(),
    [ok = erpc:call(N, ?W, settle, []) || N <- [Live, Doomed]],
    {ok, Before} = kprof:report(#{format => term}),
    ?assertMatch(#{nodes := Nodes, missing := [], requests := 12}, Before),
    kill(Doomed),
    %% The report: the merge of the two that reply, the third missing.
    {ok, R} = kprof:report(#{format => term}),
    ?assertMatch(#{nodes := [_, _], missing := [{Doomed, noconnection}], requests := 7}, R),
    ?assertEqual([node(), Live], maps:get(nodes, R)),
    ?assertEqual([{shared, 7}], [{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, R)]),
    Text = kprof_test_util:capture_io(fun() -> ok = kprof:report() end),
    Header = hd(binary:split(Text, <<"\n">>)),
    ?assertNotEqual(nomatch, binary:match(
                               Header, iolist_to_binary(["; MISSING: ", atom_to_list(Doomed),
                                                         " (noconnection)"]))),
    {ok, Json} = kprof:report(#{format => json}),
    ?assertNotEqual(nomatch, binary:match(
                               Json, iolist_to_binary(["\"missing\":[{\"node\":\"",
                                                       atom_to_list(Doomed),
                                                       "\",\"reason\":\"noconnection\"}]"]))),
    %% Asked again: the same, not an error for ever after.
    ?assertMatch({ok, #{missing := [{Doomed, noconnection}], requests := 7}},
                 kprof:report(#{format => term})),
    %% Stop: the two reached are stopped, the third named.
    ?assertEqual({error, {unreachable, [{Doomed, noconnection}]}}, kprof:stop_tiers()),
    [?assertEqual({flags, []}, erpc:call(N, erlang, trace_info, [new, flags]))
     || N <- [node(), Live]],
    ?assertMatch(#{active := false}, erpc:call(Live, kprof_tiers, info, [])),
    ?assertMatch(#{active := false}, kprof_tiers:info()),
    %% A new start with the same nodes: the dead one left out, and said.
    ?assertEqual({ok, #{dropped => [{Doomed, noconnection}]}},
                 kprof:start_tiers(?TIERS, #{nodes => Nodes})),
    ?assertMatch(#{active := true}, erpc:call(Live, kprof_tiers, info, [])),
    ok = erpc:call(Live, ?W, run_mfa_requests, [2, shared, ?W, sleep_a, [1]]),
    ok = erpc:call(Live, ?W, settle, []),
    ?assertMatch({ok, #{missing := [], requests := 2}}, kprof:report(#{format => term})),
    ?assertEqual([node(), Live], maps:get(nodes, element(2, kprof:report(#{format => term})))),
    ok = kprof:stop_tiers(),
    %% Only dead nodes: nothing to start.
    ?assertEqual({error, {nodes_down, [{Doomed, noconnection}]}},
                 kprof:start_tiers(?TIERS, #{nodes => [Doomed]})),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)).

%% A node whose code path has no kprof: refused by name, nothing started
%% here; a report that asks it names it missing.
-spec not_loaded(node()) -> term().
not_loaded(Bare) ->
    ?assertEqual({error, {kprof_not_loaded, Bare}},
                 kprof:start_tiers(?TIERS, #{nodes => [node(), Bare]})),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertMatch(#{active := false}, kprof_tiers:info()),
    ok = kprof:start_tiers(?TIERS, #{}),
    ?assertMatch({ok, #{nodes := [_], missing := [{Bare, kprof_not_loaded}]}},
                 kprof:report(#{format => term, nodes => [node(), Bare]})),
    ok = kprof:stop_tiers().

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

-spec setup() -> map().
setup() ->
    logger:set_handler_config(default, level, emergency),
    Started = kprof_test_util:distributed(kprof_nodes_test),
    ok = kprof_test_util:start(#{}),
    Paths = kprof_test_util:peer_args(?MODULE),
    {ok, LivePid, Live} = peer:start_link(#{name => peer:random_name(kprof_live), args => Paths}),
    %% Not linked: it is killed on purpose.
    {ok, DoomedPid, Doomed} = peer:start(#{name => peer:random_name(kprof_doomed), args => Paths}),
    {ok, BarePid, Bare} = peer:start_link(#{name => peer:random_name(kprof_bare)}),
    [ok = erpc:call(N, logger, set_handler_config, [default, level, emergency])
     || N <- [Live, Doomed]],
    #{live => Live, doomed => Doomed, bare => Bare, pids => [LivePid, BarePid],
      doomed_pid => DoomedPid, started => Started}.

-spec cleanup(map()) -> ok.
cleanup(#{pids := Pids, doomed_pid := DoomedPid, started := Started}) ->
    _ = kprof:stop_tiers(),
    _ = [kprof_test_util:caught(fun() -> peer:stop(P) end) || P <- [DoomedPid | Pids]],
    ok = kprof:stop(),
    Started andalso net_kernel:stop(),
    logger:set_handler_config(default, level, all),
    ok.

%% kill -9 of the node's VM; back once this node has seen it go.
-spec kill(node()) -> ok.
kill(Node) ->
    OsPid = erpc:call(Node, os, getpid, []),
    true = erlang:monitor_node(Node, true),
    _ = os:cmd("kill -9 " ++ OsPid),
    receive {nodedown, Node} -> ok end.
