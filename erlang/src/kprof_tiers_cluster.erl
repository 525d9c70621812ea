%%% @doc The tiers on several nodes: every call from the node the tiers were
%%% started from to the others, through erpc, of the per-node functions of
%%% {@link kprof_tiers} (`node_check/2', `node_start/2', `node_stop/1',
%%% `node_reset/0', `node_report/0'). The node itself is called directly.
%%% Another node's error comes back as `{node, Node, Reason}'.
%%%
%%% A start is all or none: every node validates before any starts, and a
%%% node that fails to start stops (and forgets) those started before it.
-module(kprof_tiers_cluster).

-export([start/3, each/3, reports/1]).

-define(TIMEOUT, 30000).
%% How long a node's report may take: its server waits ?REPORT_WAIT for
%% its sink and ?REPORT_MARGIN more for itself and as much for the guard
%% (kprof_tiers:node_report/0); the caller adds ?REPORT_MARGIN to ask the
%% nodes of its own server.
-define(REPORT_WAIT, 2000).
-define(REPORT_MARGIN, 1000).

%% @doc Validate on every other node of `Nodes', then start the tiers on
%% each, in order; a node that fails stops the ones started before it
%% (`node_stop(undo)').
-spec start([node()], kprof_tiers:tiers(), kprof_tiers:opts()) -> ok | {error, term()}.
start(Nodes, Tiers, Opts) ->
    Remote = [N || N <- Nodes, N =/= node()],
    case first_error([on_node(N, node_check, [Tiers, Opts]) || N <- Remote]) of
        ok -> start_each(Nodes, Tiers, Opts, []);
        {error, _} = Error -> Error
    end.

%% @doc `kprof_tiers:F(Args...)' on every node, in order: `ok', or the
%% first error.
-spec each([node()], atom(), list()) -> ok | {error, term()}.
each(Nodes, F, Args) ->
    first_error([on_node(N, F, Args) || N <- Nodes]).

%% @doc The report of every node at once (`kprof_tiers:node_report/0'),
%% each bounded: a node that does not answer by then is an error; this
%% node's own errors come untagged.
-spec reports([node()]) -> {ok, [kprof_tiers:node_report()]} | {error, term()}.
reports(Nodes) ->
    Results = erpc:multicall(Nodes, kprof_tiers, node_report, [],
                             ?REPORT_WAIT + 3 * ?REPORT_MARGIN),
    Replies = [case {N, Result} of
                   {_, {ok, {ok, _} = Ok}} -> Ok;
                   {Here, {ok, {error, _} = Error}} when Here =:= node() -> Error;
                   {_, {ok, {error, Reason}}} -> {error, {node, N, Reason}};
                   {Here, {error, {erpc, timeout}}} when Here =:= node() -> {error, timeout};
                   {_, {Class, Reason}} -> {error, {node, N, {Class, Reason}}}
               end || {N, Result} <- lists:zip(Nodes, Results)],
    case first_error(Replies) of
        ok -> {ok, [R || {ok, R} <- Replies]};
        {error, _} = Error -> Error
    end.

-spec start_each([node()], kprof_tiers:tiers(), kprof_tiers:opts(), [node()]) ->
          ok | {error, term()}.
start_each([], _Tiers, _Opts, _Started) ->
    ok;
start_each([N | Rest], Tiers, Opts, Started) ->
    case on_node(N, node_start, [Tiers, Opts]) of
        ok ->
            start_each(Rest, Tiers, Opts, [N | Started]);
        {error, _} = Error ->
            _ = [on_node(M, node_stop, [undo]) || M <- Started],
            Error
    end.

%% This node directly; another through erpc, its errors tagged with it.
-spec on_node(node(), atom(), list()) -> term().
on_node(N, F, Args) when N =:= node() ->
    apply(kprof_tiers, F, Args);
on_node(N, F, Args) ->
    try erpc:call(N, kprof_tiers, F, Args, ?TIMEOUT) of
        {error, Reason} -> {error, {node, N, Reason}};
        Other -> Other
    catch
        Class:Reason -> {error, {node, N, {Class, Reason}}}
    end.

-spec first_error([term()]) -> ok | {error, term()}.
first_error([]) -> ok;
first_error([{error, _} = Error | _]) -> Error;
first_error([_ | Rest]) -> first_error(Rest).
