%%% @doc Tiers on several nodes: started on all or none, reports merged
%%% exactly by identity. Peers are started with OTP `peer'; this node is
%%% made distributed for the test (`kprof_test', short names; epmd is
%%% started if needed).
-module(kprof_tiers_multi_tests).

-include_lib("eunit/include/eunit.hrl").

-define(W, kprof_tiers_work).
-define(TIERS, [{a, [{?W, sleep_a, 1}]}, {b, [{?W, sleep_b, 1}]}]).

-spec multi_test_() -> term().
multi_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(#{peer := Peer, bad := Bad}) ->
             [{"two nodes: rows merged by identity, histograms exactly",
               {timeout, 120, fun() -> merge(Peer) end}},
              {"a node that cannot start: nothing started anywhere",
               {timeout, 120, fun() -> all_or_nothing(Peer, Bad) end}},
              {"a module missing on a node: refused before anything starts",
               {timeout, 120, fun() -> missing_module(Peer) end}}]
     end}.

-spec merge(node()) -> term().
merge(Peer) ->
    Nodes = [node(), Peer],
    ok = kprof:start_tiers(?TIERS, #{nodes => Nodes}),
    ?assertMatch(#{active := true}, erpc:call(Peer, kprof_tiers, info, [])),
    ?W:run_mfa_requests(10, shared, ?W, sleep_a, [2]),
    ?W:run_mfa_requests(5, local_only, ?W, sleep_b, [1]),
    ok = erpc:call(Peer, ?W, run_mfa_requests, [7, shared, ?W, sleep_a, [3]]),
    ok = erpc:call(Peer, ?W, run_mfa_requests, [4, {peer, only}, ?W, sleep_b, [1]]),
    ok = ?W:settle(),
    ok = erpc:call(Peer, ?W, settle, []),
    {ok, R} = kprof:report(#{format => term}),
    ?assertEqual(Nodes, maps:get(nodes, R)),
    ?assertEqual([{shared, 17}, {local_only, 5}, {{peer, only}, 4}],
                 [{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, R)]),
    ?assertMatch(#{requests := 26, all := #{requests := 26}, seen := 26, sampled := 26}, R),
    %% The merged histogram is the exact merge of the two nodes' own.
    {ok, Here} = kprof_tiers:node_report(),
    {ok, There} = erpc:call(Peer, kprof_tiers, node_report, []),
    H = kprof_hist:merge(sink_hist(Here, shared, 0), sink_hist(There, shared, 0)),
    #{count := Count, total := Total, min := Min, max := Max} = H,
    [P50, P90, P99, P999] = kprof_hist:quantiles(H),
    Stats = a_self(R, shared),
    ?assertEqual(17, Count),
    ?assertEqual(#{count => Count, mean => Total / Count / 1.0e6, min => Min / 1.0e6,
                   max => Max / 1.0e6, p50 => P50 / 1.0e6, p90 => P90 / 1.0e6,
                   p99 => P99 / 1.0e6, p999 => P999 / 1.0e6}, Stats),
    %% Each node alone.
    {ok, RPeer} = kprof:report(#{format => term, nodes => [Peer]}),
    ?assertEqual(7, maps:get(requests, row(RPeer, shared))),
    Text = unicode:characters_to_list(kprof_report_render:text(R, #{})),
    ?assertMatch({match, _}, re:run(Text, atom_to_list(Peer))),
    %% Reset and stop reach every node.
    ok = kprof:reset(),
    ?assertMatch({ok, #{requests := 0, rows := []}}, kprof:report(#{format => term})),
    ok = kprof:stop_tiers(),
    ?assertMatch(#{active := false}, erpc:call(Peer, kprof_tiers, info, [])),
    ?assertEqual({flags, []}, erpc:call(Peer, erlang, trace_info, [new, flags])),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)).

%% The third node has no sink binary: the two before it, started
%% already, are stopped again.
-spec all_or_nothing(node(), node()) -> term().
all_or_nothing(Peer, Bad) ->
    Result = kprof:start_tiers(?TIERS, #{nodes => [node(), Peer, Bad]}),
    ?assertEqual({error, {node, Bad, {sink_not_built, "/nonexistent/kprof_sink"}}}, Result),
    [begin
         ?assertEqual({flags, []}, erpc:call(N, erlang, trace_info, [new, flags])),
         ?assertEqual({match_spec, false},
                      erpc:call(N, erlang, trace_info, [{?W, sleep_a, 1}, match_spec])),
         ?assertEqual(untraced, erpc:call(N, kprof_tiers, enter, [x])),
         ?assertMatch(#{active := false, tiers := []}, erpc:call(N, kprof_tiers, info, []))
     end || N <- [node(), Peer]].

%% A module loaded here only: the peer refuses it in validation, before
%% this node starts anything.
-spec missing_module(node()) -> term().
missing_module(Peer) ->
    {ok, Mod, Bin} = compile:forms([{attribute, 1, module, kprof_tiers_here_only},
                                    {attribute, 2, export, [{f, 0}]},
                                    {function, 3, f, 0, [{clause, 3, [], [], [{atom, 3, ok}]}]}]),
    {module, Mod} = code:load_binary(Mod, "kprof_tiers_here_only.erl", Bin),
    Result = kprof:start_tiers([{here, [{Mod, f, 0}]}], #{nodes => [node(), Peer]}),
    ?assertEqual({error, {node, Peer, {unknown_module, here, Mod}}}, Result),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual({match_spec, false}, erlang:trace_info({Mod, f, 0}, match_spec)),
    ?assertMatch(#{active := false}, kprof_tiers:info()).

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

-spec setup() -> map().
setup() ->
    logger:set_handler_config(default, level, emergency),
    Started = kprof_test_util:distributed(kprof_test),
    ok = kprof_test_util:start(#{}),
    Paths = kprof_test_util:peer_args(?MODULE),
    {ok, PeerPid, Peer} = peer:start_link(#{name => peer:random_name(kprof_peer), args => Paths}),
    {ok, BadPid, Bad} = peer:start_link(#{name => peer:random_name(kprof_bad), args => Paths}),
    ok = erpc:call(Bad, application, load, [kprof]),
    ok = erpc:call(Bad, application, set_env, [kprof, sink_path, "/nonexistent/kprof_sink"]),
    ok = erpc:call(Bad, logger, set_handler_config, [default, level, emergency]),
    #{peer => Peer, bad => Bad, pids => [PeerPid, BadPid], started => Started}.

-spec cleanup(map()) -> ok.
cleanup(#{pids := Pids, started := Started}) ->
    _ = kprof:stop_tiers(),
    [peer:stop(P) || P <- Pids],
    ok = kprof:stop(),
    Started andalso net_kernel:stop(),
    logger:set_handler_config(default, level, all),
    ok.

%% The self histogram of tier `Col' of an identity in a node report.
-spec sink_hist(map(), term(), non_neg_integer()) -> kprof_hist:hist().
sink_hist(#{raw := #{rows := Rows}}, Id, Col) ->
    [Cols] = [Cols || #{identity := I, tiers := Cols} <- Rows, I =:= Id],
    #{self := Self} = lists:nth(Col + 1, Cols),
    Self.

-spec row(map(), term()) -> map().
row(#{rows := Rows}, Id) ->
    [Row] = [R || #{identity := I} = R <- Rows, I =:= Id],
    Row.

-spec a_self(map(), term()) -> map().
a_self(R, Id) ->
    #{tiers := [#{tier := a, self := Self} | _]} = row(R, Id),
    Self.
