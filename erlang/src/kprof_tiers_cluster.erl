%%% @doc The tiers on several nodes: {@link start/2}, {@link stop/0},
%%% {@link reset/0} and {@link report/1} (behind kprof:start_tiers/2,
%%% stop_tiers/0, reset/0 and report/1), and every call they make from the
%%% node the tiers were started from to the others, through erpc, of the
%%% per-node functions of {@link kprof_tiers} (`node_check/2',
%%% `node_start/2', `node_stop/1', `node_reset/0', `node_report/0'), whose
%%% server keeps the nodes started. The node itself is called directly.
%%% Another node's error comes back as `{node, Node, Reason}'; a node where
%%% kprof's code is not loaded as `{kprof_not_loaded, Node}'.
%%%
%%% A node that cannot be reached (`noconnection': it is down, or the
%%% network between) is not an error that stops the others:
%%% <ul>
%%% <li>a start leaves it out and says so (`{ok, Live, Down}'); every node
%%%     reached validates before any starts, and a node that fails to
%%%     start stops (and forgets) those started before it;</li>
%%% <li>a stop or a reset reaches every other node, then answers
%%%     `{error, {unreachable, [{Node, Reason}]}}';</li>
%%% <li>a report merges the nodes that replied and lists the others, with
%%%     why, in `missing'.</li>
%%% </ul>
-module(kprof_tiers_cluster).

-include("kprof_tiers.hrl").

%% PUBLIC (behind kprof:start_tiers/2, stop_tiers/0, reset/0, report/1)
-export([start/2, stop/0, reset/0, report/1]).
-export([start/3, each/3, reports/1]).

-define(TIMEOUT, 30000).
%% How long a node's report may take: its server waits ?REPORT_WAIT for
%% its sink and ?REPORT_MARGIN more for itself and as much for the guard
%% (kprof_tiers:node_report/0); the caller adds ?REPORT_MARGIN to ask the
%% nodes of its own server.
-define(REPORT_WAIT, 2000).
-define(REPORT_MARGIN, 1000).

%% @doc Validate, then start the tiers on every node of option `nodes'
%% (default: this one), starting kprof where it is not running. Returns
%% `{error, Reason}' naming the culprit and changes nothing when any node
%% refuses; errors of another node come as `{node, Node, Reason}', a node
%% without kprof's code gives `{error, {kprof_not_loaded, Node}}'. A node
%% that cannot be reached (down) is left out: `{ok, #{dropped => [{Node,
%% noconnection}]}}', the tiers running on the others. The options:
%% {@link kprof_tiers}'s module doc.
-spec start(kprof_tiers:tiers(), kprof_tiers:opts()) ->
          ok | {ok, #{dropped := [{node(), term()}]}} | {error, term()}.
start(Tiers, Opts) ->
    case kprof_tiers_plan:check(Tiers, Opts) of
        {ok, #plan{nodes = Nodes}} ->
            NodeOpts = maps:remove(nodes, Opts),
            case kprof_app:ensure_started() of
                ok -> start_nodes(Nodes, Tiers, NodeOpts);
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% Every node validates before any starts (start/3); this node's server
%% remembers them for stop, reset and report.
%% Nodes that cannot be reached are left out: `{ok, #{dropped => Down}}'.
-spec start_nodes([node()], kprof_tiers:tiers(), kprof_tiers:opts()) ->
          ok | {ok, #{dropped := [{node(), term()}]}} | {error, term()}.
start_nodes(Nodes, Tiers, Opts) ->
    case start(Nodes, Tiers, Opts) of
        {ok, Live, Down} ->
            case {kprof_tiers:call({set_nodes, Live}, ?TIMEOUT), Down} of
                {ok, []} -> ok;
                {ok, _} -> {ok, #{dropped => Down}};
                {{error, _} = Error, _} -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc Stop tracing on every node the tiers were started on. What was
%% recorded stays for {@link report/1} until the next start or reset.
%% `ok' when tracing is off: turned off now, or already by a stop or an
%% abort (the report says which); `{error, {already_stopped, #{reason =>
%% kprof_tiers_restarted, undone => Undone}}}' when the server was killed
%% while the tiers ran and its successor turned their tracing off (see
%% {@link kprof_tiers:node_stop/1}).
%% A node that cannot be reached: every other node is stopped, then
%% `{error, {unreachable, [{Node, Reason}]}}'.
-spec stop() -> ok | {error, term()}.
stop() ->
    each_node(node_stop, [stop]).

%% @doc Forget what was recorded, on every node; tracing goes on.
-spec reset() -> ok | {error, term()}.
reset() ->
    each_node(node_reset, []).

%% @doc The report of every node (option `nodes', default those of
%% {@link start/2}), merged: `format => text' prints the table and
%% returns `ok', `term' returns `{ok, Report}' (see {@link kprof_report}),
%% `json' returns `{ok, JSON}'. Returns within 6 s and the time to build
%% the report: each node's server waits at most 2 s for its sink, and a
%% sink that does not answer, or died, gives the rows of its last poll
%% flagged in `incomplete' (and in the text's header). A node that does
%% not reply (down, without kprof, or answering an error) is named with
%% why in `missing' (and `MISSING: ...' in the header); the report merges
%% the others.
-spec report(kprof_tiers:report_opts()) -> ok | {ok, kprof_report:report() | binary()} | {error, term()}.
report(Opts) ->
    case kprof_tiers_plan:check_report_opts(Opts) of
        ok -> report_nodes(Opts);
        {error, _} = Error -> Error
    end.

%% @doc Validate on every other node of `Nodes' that can be reached, then
%% start the tiers on each, in order; a node that fails stops the ones
%% started before it (`node_stop(undo)'). `{ok, Started, Down}': `Down'
%% are the nodes left out, unreachable, with why; `{error, {nodes_down,
%% Down}}' when none is left.
-spec start([node()], kprof_tiers:tiers(), kprof_tiers:opts()) ->
          {ok, [node()], [{node(), term()}]} | {error, term()}.
start(Nodes, Tiers, Opts) ->
    Checked = [{N, on_node(N, node_check, [Tiers, Opts])} || N <- Nodes, N =/= node()],
    case first_error([R || {_, R} <- Checked]) of
        ok ->
            Down = [{N, Why} || {N, {down, Why}} <- Checked],
            case [N || N <- Nodes, not lists:keymember(N, 1, Down)] of
                [] -> {error, {nodes_down, Down}};
                Live -> start_each(Live, Tiers, Opts, [], Down)
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc `kprof_tiers:F(Args...)' on every node, in order: `ok', the first
%% error of a node reached, or `{error, {unreachable, [{Node, Reason}]}}'
%% when every node reached answered `ok' but some could not be reached.
-spec each([node()], atom(), list()) -> ok | {error, term()}.
each(Nodes, F, Args) ->
    Results = [{N, on_node(N, F, Args)} || N <- Nodes],
    case first_error([R || {_, R} <- Results]) of
        ok ->
            case [{N, Why} || {N, {down, Why}} <- Results] of
                [] -> ok;
                Down -> {error, {unreachable, Down}}
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc The report of every node at once (`kprof_tiers:node_report/0'),
%% each bounded: `{ok, Reports, Missing}', `Missing' the nodes that did
%% not reply with a report, each with why (`noconnection', `timeout',
%% `kprof_not_loaded', or the error it answered). This node's own errors
%% come untagged; `{error, {nodes_missing, Missing}}' when no node replied.
-spec reports([node()]) ->
          {ok, [kprof_tiers:node_report()], [{node(), term()}]} | {error, term()}.
reports(Nodes) ->
    Results = erpc:multicall(Nodes, kprof_tiers, node_report, [],
                             ?REPORT_WAIT + 3 * ?REPORT_MARGIN),
    Replies = [case {N, Result} of
                   {_, {ok, {ok, Report}}} -> {ok, Report};
                   {Here, {ok, {error, _} = Error}} when Here =:= node() -> Error;
                   {Here, {error, {erpc, timeout}}} when Here =:= node() -> {error, timeout};
                   {_, {ok, {error, Reason}}} -> {missing, {N, Reason}};
                   {_, {Class, Reason}} -> {missing, {N, why(Class, Reason)}}
               end || {N, Result} <- lists:zip(Nodes, Results)],
    Missing = [M || {missing, M} <- Replies],
    case first_error(Replies) of
        ok when length(Missing) =:= length(Replies) -> {error, {nodes_missing, Missing}};
        ok -> {ok, [R || {ok, R} <- Replies], Missing};
        {error, _} = Error -> Error
    end.

-spec start_each([node()], kprof_tiers:tiers(), kprof_tiers:opts(), [node()],
                 [{node(), term()}]) ->
          {ok, [node()], [{node(), term()}]} | {error, term()}.
start_each([], _Tiers, _Opts, Started, Down) ->
    {ok, lists:reverse(Started), Down};
start_each([N | Rest], Tiers, Opts, Started, Down) ->
    case on_node(N, node_start, [Tiers, Opts]) of
        ok ->
            start_each(Rest, Tiers, Opts, [N | Started], Down);
        {down, Why} ->
            start_each(Rest, Tiers, Opts, Started, Down ++ [{N, Why}]);
        {error, _} = Error ->
            _ = [on_node(M, node_stop, [undo]) || M <- Started],
            Error
    end.

%% This node directly; another through erpc: its errors tagged with it,
%% `{down, Why}' when it cannot be reached.
-spec on_node(node(), atom(), list()) -> term().
on_node(N, F, Args) when N =:= node() ->
    apply(kprof_tiers, F, Args);
on_node(N, F, Args) ->
    try erpc:call(N, kprof_tiers, F, Args, ?TIMEOUT) of
        {error, Reason} -> {error, {node, N, Reason}};
        Other -> Other
    catch
        Class:Reason ->
            case why(Class, Reason) of
                noconnection -> {down, noconnection};
                kprof_not_loaded -> {error, {kprof_not_loaded, N}};
                Why -> {error, {node, N, Why}}
            end
    end.

%% What an erpc exception says of the node: unreachable, without kprof's
%% code (kprof_tiers undefined there), or the exception as it came.
-spec why(atom(), term()) -> term().
why(error, {erpc, noconnection}) -> noconnection;
why(error, {erpc, timeout}) -> timeout;
why(error, {exception, undef, [{kprof_tiers, _, _, _} | _]}) -> kprof_not_loaded;
why(Class, Reason) -> {Class, Reason}.

-spec first_error([term()]) -> ok | {error, term()}.
first_error([]) -> ok;
first_error([{error, _} = Error | _]) -> Error;
first_error([_ | Rest]) -> first_error(Rest).

%%% The nodes the tiers were started on

%% kprof_tiers:F(Args...) on every node the tiers were started on.
-spec each_node(atom(), list()) -> ok | {error, term()}.
each_node(F, Args) ->
    case started_nodes() of
        {ok, Nodes} -> each(Nodes, F, Args);
        {error, _} = Error -> Error
    end.

-spec started_nodes() -> {ok, [node()]} | {error, term()}.
started_nodes() ->
    started_nodes(?TIMEOUT).

-spec started_nodes(timeout()) -> {ok, [node()]} | {error, term()}.
started_nodes(Timeout) ->
    case kprof_tiers:call(nodes, Timeout) of
        [] -> {ok, [node()]};
        Nodes when is_list(Nodes) -> {ok, Nodes};
        {error, _} = Error -> Error
    end.

%% Every node at once, each bounded (node_report/0 waits ?REPORT_WAIT for
%% its sink, ?REPORT_MARGIN more for its server and as much for the guard):
%% with the nodes asked of this server first (?REPORT_MARGIN), report/1
%% returns within ?REPORT_WAIT + 4 * ?REPORT_MARGIN ms (6 s) and the time
%% to build the report, whatever the sinks do. A node that does not answer
%% by then is an error; a sink that does not is a report flagged
%% `incomplete'.
-spec report_nodes(kprof_tiers:report_opts()) -> ok | {ok, term()} | {error, term()}.
report_nodes(Opts) ->
    Nodes = case maps:find(nodes, Opts) of
                {ok, Ns} -> {ok, Ns};
                error -> started_nodes(?REPORT_MARGIN)
            end,
    case Nodes of
        {ok, Ns1} ->
            case reports(Ns1) of
                {ok, Reports, Missing} ->
                    format(kprof_report:build(Reports, Missing, Opts), Opts);
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

-spec format({ok, kprof_report:report()} | {error, term()}, kprof_tiers:report_opts()) ->
          ok | {ok, term()} | {error, term()}.
format({ok, Built}, Opts) ->
    case kprof_report:sort(Built, maps:get(sort, Opts, requests)) of
        {ok, Report} ->
            case maps:get(format, Opts, text) of
                text -> io:put_chars(kprof_report_render:text(Report, Opts));
                %% A charlist: what erl_call (bin/x eval of a rebar3 release)
                %% prints of it is the text, line by line (of a binary, #Bin<...>).
                string -> {ok, unicode:characters_to_list(kprof_report_render:text(Report, Opts))};
                term -> {ok, Report};
                json -> {ok, kprof_report_render:json(Report)}
            end;
        {error, _} = Error ->
            Error
    end;
format({error, _} = Error, _Opts) ->
    Error.
