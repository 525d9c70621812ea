%%% @doc Tiered request profiling: where the time of each kind of request
%%% goes, tier by tier (HTTP handling, database, templating, ...).
%%%
%%% Users call {@link kprof:start_tiers/2}, {@link kprof:request/2} and
%%% {@link kprof:report/1}; this module validates, sets the tracing up,
%%% and owns the state of the tiers on its node (a gen_server under
%%% `kprof_sup'). doc/tiers.md is the contract with the sink.
%%%
%%% == How a request is traced ==
%%%
%%% ```
%%%  kprof:request(Id, Fun)          seq_trace label L on the caller,
%%%    kprof_mark:start(Id) ------->  call {Token(L), Caller, Id}       --+
%%%    Fun()                                                              |
%%%      http:handle/1 (tier 0) --->  call + return_to, label L         --+
%%%      gen_server:call(Db, Q) ....  the message carries L, so the       +--> port --> kprof_sink
%%%        db:query/1 (tier 1) ---->  call + return_to in Db, label L   --+    (groups by L,
%%%    kprof_mark:stop() ---------->  call {Token(L), Caller}           --+     times tiers)
%%% '''
%%% Time goes to the most recently opened frame still open in any process
%%% of the request (doc/tiers.md): while `http:handle/1' waits for the db
%%% server, `db:query/1' has the time once the server runs it; until then
%%% (the request waits in the server's queue) the time is still http's.
%%%
%%% A tier function's trace pattern only fires in a process that carries a
%%% seq_trace token (`is_seq_trace'), so untraced processes cost one failed
%%% match-spec guard per call, and `arity' plus `return_to' keep arguments
%%% and return values out of the stream: a function returning 10 MB adds
%%% the same ~100 bytes to the stream as one returning `ok'.
%%%
%%% == A session ==
%%%
%%% ```
%%% 1> kprof:start_tiers([{http, [{shop_http, '_', '_'}]},
%%%                       {database, [{shop_db, query, 2}]},
%%%                       {templating, [{shop_tpl, render, '_'}]}],
%%%                      #{sample => 0.1, slow_ms => 50}).
%%% ok
%%% 2> [kprof:request({users, get}, fun() -> shop_http:get_user(N) end)
%%%     || N <- lists:seq(1, 10000)], ok.
%%% ok
%%% 3> kprof:report().
%%% kprof tiers on nonode@nohost: 3.21 s traced, requests 1003 recorded (seen 10000, sampled 1003), 0 in flight, events 10030, dropped 0, tracing on
%%% times in ms; per tier its self time (time in its own code); other: time in no tier
%%% identity      reqs  http          database      templating    other
%%%                     mean   p99    mean   p99    mean   p99    mean
%%% all           1003  0.412  1.90   2.10   9.80   0.700  2.20   0.050
%%% {users,get}   1003  0.412  1.90   2.10   9.80   0.700  2.20   0.050
%%% ok
%%% 4> kprof:stop_tiers().
%%% ok
%%% '''
%%% `kprof:report(#{format => term})' gives the same as a map (see
%%% {@link kprof_report}), `#{format => json}' as JSON, `#{time =>
%%% inclusive}' shows the time a tier had a frame open instead of its self
%%% time.
%%%
%%% == Options of start/2 ==
%%% <ul>
%%% <li>`sample' (1.0): the fraction of `kprof:request/2' and
%%%     `kprof:set_token/1' calls that are traced; the decision is taken
%%%     with `rand:uniform()' in the caller, an untraced call costs a
%%%     `persistent_term' read and two counter updates.</li>
%%% <li>`slow_ms' (none), `slow_max' (20): the slowest requests of at
%%%     least `slow_ms' are reported one by one.</li>
%%% <li>`window' (none): report only the last `window' seconds: the sink
%%%     is polled every tenth of the window and the last ten slices are
%%%     merged.</li>
%%% <li>`entry': an MFA spec or a list of them whose calls open a request
%%%     by themselves (for servers whose entry point cannot be wrapped);
%%%     `identity' (`mfa'): the request identity of an entry call:
%%%     `mfa', `{arg, N}' (the N-th argument), a one-argument fun typed in
%%%     the shell (converted like `dbg:fun2ms/1': `fun([Req, _]) ->
%%%     element(2, Req) end'; its last expression is the identity), or
%%%     `{ms, MatchSpec}' for compiled code, e.g. `{ms,
%%%     dbg:fun2ms(fun([Req, _]) -> element(2, Req) end)}' with the
%%%     ms_transform header included. A compiled fun gives `{error,
%%%     {identity_fun_not_convertible, Hint}}'. Entry calls are not
%%%     sampled.</li>
%%% <li>`nodes' (`[node()]'): start on every node, all or none.</li>
%%% <li>`max_identities' (200), `max_inflight' (20000),
%%%     `max_request_events' (20000), `grace_ms' (100): the sink's limits
%%%     (doc/tiers.md).</li>
%%% <li>`full_trace' (`false'): `Identity', `[Identity]' or `all': every
%%%     function of every loaded module (kprof's own and `erlang''s BIFs
%%%     aside; modules loaded later are not) is traced in processes that
%%%     carry a request's token, and the requests of those identities are
%%%     aggregated per MFA and per call path (a flame graph per identity:
%%%     {@link kprof:full_trace_flame/2}; the report's `full_trace' key).
%%%     Tier times stay what they are without it. The trace patterns take
%%%     a while to set (module by module) and every call of a request costs
%%%     a trace message, whichever its identity: turn it on for a
%%%     while, not for ever. `full_trace_max_events' (100000 per request),
%%%     `full_trace_max_nodes' (100000 call paths per identity),
%%%     `full_trace_max_identities' (20): the sink's caps, past which events,
%%%     paths and identities are dropped and counted.</li>
%%% <li>`max_lag_ms', `max_queue_bytes', `max_memory_bytes', `max_events',
%%%     `rate', `max_seconds': the limits of {@link kprof_guard}, which
%%%     the tiers arm on every node they run on (its defaults when none is
%%%     given).</li>
%%% </ul>
%%%
%%% == Safety ==
%%% <ul>
%%% <li>Everything is validated, on every node, before any trace flag or
%%%     pattern is set: a bad call changes nothing. A step that fails
%%%     after that undoes the steps before it, on every node.</li>
%%% <li>{@link abort/2} turns tracing off from the calling process without
%%%     waiting for this server, and the report says so. The tiers arm
%%%     {@link kprof_guard} with it: overload, a limit, or a sink that dies
%%%     aborts them.</li>
%%% <li>Stopping kprof stops the tiers. While tiers run, kprof owns call
%%%     tracing: `stop' clears the `call' flags of every process.</li>
%%% </ul>
-module(kprof_tiers).
-behaviour(gen_server).

%% PUBLIC (behind kprof:start_tiers/2, stop_tiers/0, reset/0, report/1)
-export([start_link/0, start/2, stop/0, reset/0, report/1,
         abort/1, abort/2, info/0, full_trace_flame/2]).
%% REQUESTS (kprof:request/2, set_token/1, clear_token/0)
-export([enter/1, leave/1]).
%% VALIDATION
-export([check/2]).
%% PER NODE: called through erpc by the node the tiers were started from
-export([node_check/2, node_start/2, node_stop/1, node_reset/0, node_report/0]).
%% gen_server callbacks
-export([init/1, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2, code_change/3]).

-export_type([tiers/0, mfa_spec/0, opts/0, report_opts/0, node_report/0]).

-define(SERVER, ?MODULE).
%% {Sample, Counters, Patterns} while tiers run on this node.
-define(PT, {?MODULE, request}).
-define(SEEN, 1).
-define(SAMPLED, 2).
-define(ACTIVE, 3).
%% Patterns kprof_guard put back after a code reload, since start.
-define(REAPPLIED, 4).
-define(MAX_TIERS, 32).
-define(FLAGS, [call, arity, return_to, monotonic_timestamp]).
-define(SLICES, 10).
%% MFAs per identity in the report's full_trace.
-define(FULL_TOP, 100).
-define(TIMEOUT, 30000).
-define(RESERVED_MODULES, [kprof, kprof_mark, kprof_tiers]).
%% Never full-traced: BIFs only, or tracing's own.
-define(FULL_SKIP, [erlang, erts_internal, erl_tracer, kprof_tracer, kprof_sink,
                    kprof_guard]).
-define(RESERVED_NAMES, [other, all]).
%% Options that are kprof_guard's limits.
-define(GUARD_KEYS, kprof_guard:limit_keys()).

-type tier_name() :: atom().
-type mfa_spec() :: {module(), atom(), arity() | '_'} | {module(), '_', '_'}.
-type tiers() :: [{tier_name(), [mfa_spec()]}].
-type identity() :: mfa | {arg, pos_integer()} | fun((list()) -> term())
                  | {ms, ets:match_spec()}.
-type opts() :: #{sample => float(),            % 1.0: every request
                  slow_ms => number(),          % none: no slow list
                  slow_max => non_neg_integer(),% 20
                  window => number(),           % none: since start/reset
                  entry => mfa_spec() | [mfa_spec()],
                  identity => identity(),       % mfa
                  nodes => [node()],            % [node()]
                  max_identities => pos_integer(),
                  max_inflight => pos_integer(),
                  max_request_events => pos_integer(),
                  grace_ms => non_neg_integer(),
                  full_trace => false | all | term() | [term()],
                  full_trace_max_events => pos_integer(),
                  full_trace_max_nodes => pos_integer(),
                  full_trace_max_identities => pos_integer(),
                  atom() => term()}.          % kprof_guard:limits()
-type report_opts() :: #{format => text | term | json,   % text
                         time => self | inclusive,       % self
                         nodes => [node()],              % those of start/2
                         limit => pos_integer() | infinity}. % text: 50
%% What one node reports; see kprof_report:merge/1.
-type node_report() :: #{atom() => term()}.
-type sink_spec() :: {module(), atom(), arity() | '_',
                      non_neg_integer() | start | stop | entry | traced}.
-type pattern() :: {mfa_spec(), [tuple()]}.

-record(plan, {tiers = [] :: [{tier_name(), [mfa_spec()]}],
               patterns = [] :: [pattern()],      % in the order they are set
               sink_specs = [] :: [sink_spec()],
               sink_opts = [] :: [{atom(), term()}],
               full = false :: false | all | [term()],  % full_trace
               full_patterns = [] :: [pattern()],  % set at start: {{M, '_', '_'}, MS}
               %% The same for kprof_guard: {module, M, MS, [local], Sentinel}.
               full_watch = [] :: [kprof_guard:pattern()],
               sample = 1.0 :: number(),
               window :: undefined | number(),    % seconds
               slow_max = 20 :: non_neg_integer(),
               limits = #{} :: map(),              % kprof_guard's, given ones only
               %% The sink's event count before the flags were set, when a
               %% limit counts events (kprof_guard:events_baseline/1).
               events0 :: undefined | non_neg_integer(),
               nodes = [] :: [node()]}).

-record(state, {plan :: undefined | #plan{},
                active = false :: boolean(),
                nodes = [] :: [node()],          % started from this node
                since = 0 :: integer(),          % monotonic ns of start/reset
                until :: undefined | integer(),  % monotonic ns of stop/abort
                counters :: undefined | counters:counters_ref(),
                base = #{} :: #{atom() => non_neg_integer()},
                slices = [] :: [{integer(), integer(), map()}], % newest first
                slice_from = 0 :: integer(),
                last_ts :: term(),               % the sink's last event, last poll
                quiet = false :: boolean(),      % no event between the last two polls
                timer :: undefined | reference(),
                aborted = false :: false | {term(), term(), integer()},
                sink_mon :: undefined | reference()}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Start the server, registered as `kprof_tiers' (by `kprof_sup').
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?SERVER}, ?MODULE, [], []).

%% @doc Validate, then start the tiers on every node of option `nodes'
%% (default: this one), starting kprof where it is not running. Returns
%% `{error, Reason}' naming the culprit and changes nothing when any node
%% refuses; errors of another node come as `{node, Node, Reason}'. See
%% the module doc for the options.
-spec start(tiers(), opts()) -> ok | {error, term()}.
start(Tiers, Opts) ->
    case check(Tiers, Opts) of
        {ok, #plan{nodes = Nodes}} ->
            NodeOpts = maps:remove(nodes, Opts),
            case ensure_kprof() of
                ok -> start_nodes(Nodes, Tiers, NodeOpts);
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc Stop tracing on every node the tiers were started on. What was
%% recorded stays for {@link report/1} until the next start or reset.
-spec stop() -> ok | {error, term()}.
stop() ->
    each_node(fun(N) -> on_node(N, node_stop, [stop]) end).

%% @doc Forget what was recorded, on every node; tracing goes on.
-spec reset() -> ok | {error, term()}.
reset() ->
    each_node(fun(N) -> on_node(N, node_reset, []) end).

%% @doc The report of every node (option `nodes', default those of
%% {@link start/2}), merged: `format => text' prints the table and
%% returns `ok', `term' returns `{ok, Report}' (see {@link kprof_report}),
%% `json' returns `{ok, JSON}'.
-spec report(report_opts()) -> ok | {ok, kprof_report:report() | binary()} | {error, term()}.
report(Opts) ->
    case check_report_opts(Opts) of
        ok -> report_nodes(Opts);
        {error, _} = Error -> Error
    end.

%% @doc Write a flame graph of each full-traced identity (`all') or of one,
%% from this node's sink, with the writers of the flame captures:
%% `{ok, [{Identity, Files}]}'. Options: `output_format' (`folded', `perf',
%% `speedscope', `svg', a list, or `all', the default), `output_directory'
%% (`"."'), `open => speedscope'. Files are named
%% `kprof-full-<identity>-<YYYYMMDD-HHMMSS>.<ext>'; the aggregates stay.
-spec full_trace_flame(term(), map()) ->
          {ok, [{term(), [file:filename()]}]} | {error, term()}.
full_trace_flame(Which, Opts) when is_map(Opts) ->
    Flame = [output_format, output_directory, open],
    case [{K, V} || {K, V} <- lists:sort(maps:to_list(maps:without(Flame, Opts)))] of
        [] ->
            case kprof_flame:validate(Opts, apply) of
                {ok, Cfg} -> full_flame(Which, Cfg);
                {error, _} = Error -> Error
            end;
        [KV | _] ->
            {error, {bad_option, KV}}
    end;
full_trace_flame(_Which, Opts) ->
    {error, {bad_options, Opts}}.

-spec full_flame(term(), map()) -> {ok, [{term(), [file:filename()]}]} | {error, term()}.
full_flame(Which, Cfg) ->
    %% Every trace message sent so far is in the port's queue before the command.
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after ?TIMEOUT -> ok end,
    case kprof_sink:command({tier_full_report, 0}) of
        #{on := true, identities := Aggs} ->
            Ids = [Id || {Id, _} <- Aggs],
            case Which of
                all -> write_full(Ids, Cfg);
                _ ->
                    case lists:member(Which, Ids) of
                        true -> write_full([Which], Cfg);
                        false -> {error, {no_full_trace, Which}}
                    end
            end;
        #{on := false} ->
            {error, full_trace_off};
        {error, not_started} ->
            {error, not_started};
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.

-spec write_full([term()], map()) -> {ok, [{term(), [file:filename()]}]} | {error, term()}.
write_full(Ids, Cfg) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    Formats = kprof_flame:formats(maps:get(output_format, Cfg)),
    case filelib:ensure_path(Dir) of
        ok -> write_full(Ids, Dir, Formats, Cfg, []);
        {error, Reason} -> {error, {output_directory, Dir, Reason}}
    end.

-spec write_full([term()], file:filename(), [atom()], map(), list()) ->
          {ok, [{term(), [file:filename()]}]} | {error, term()}.
write_full([], _Dir, _Formats, _Cfg, Acc) ->
    {ok, lists:reverse(Acc)};
write_full([Id | Rest], Dir, Formats, Cfg, Acc) ->
    Cmd = {tier_full_write, Id, unicode:characters_to_binary(Dir),
           unicode:characters_to_binary(full_base_name(Id)), Formats},
    case kprof_sink:command(Cmd, 300000) of
        {ok, Paths, _Info} ->
            Files = [unicode:characters_to_list(P) || P <- Paths],
            kprof_flame:maybe_open(maps:get(open, Cfg), Files),
            write_full(Rest, Dir, Formats, Cfg, [{Id, Files} | Acc]);
        {error, no_events} ->
            write_full(Rest, Dir, Formats, Cfg, [{Id, []} | Acc]);
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.

%% kprof-full-<identity as safe text>-<local time>
-spec full_base_name(term()) -> string().
full_base_name(Id) ->
    Text = unicode:characters_to_list(io_lib:format("~0tp", [Id])),
    Safe = string:slice([case (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
                                 orelse (C >= $0 andalso C =< $9) orelse C =:= $_ of
                             true -> C;
                             false -> $_
                         end || C <- Text], 0, 60),
    {{Y, Mo, D}, {H, Mi, S}} = calendar:local_time(),
    lists:flatten(io_lib:format("kprof-full-~ts-~4..0b~2..0b~2..0b-~2..0b~2..0b~2..0b",
                                [Safe, Y, Mo, D, H, Mi, S])).

%% @equiv abort(Reason, #{})
-spec abort(term()) -> ok.
abort(Reason) ->
    abort(Reason, #{}).

%% @doc Turn off every trace flag and pattern the tiers set on this node,
%% at once and from the calling process (an overloaded node must not wait
%% for a server), and record `{Reason, Info, Time}' for the report. What
%% was recorded stays. Does nothing when no tiers run.
-spec abort(term(), term()) -> ok.
abort(Reason, Info) ->
    case persistent_term:get(?PT, undefined) of
        {_Sample, Counters, Patterns} ->
            case counters:get(Counters, ?ACTIVE) of
                1 ->
                    %% Requests stop at once; the server hears of it before
                    %% the slow part (trace_pattern/3 waits for every
                    %% scheduler), and untraces again should this process
                    %% die half-way.
                    counters:put(Counters, ?ACTIVE, 0),
                    Time = erlang:system_time(millisecond),
                    gen_server:cast(?SERVER, {aborted, Reason, Info, Time}),
                    untrace_now(Patterns);
                _ ->
                    ok
            end;
        undefined ->
            ok
    end.

%% @doc What runs on this node: the tiers, whether tracing is on, the
%% abort reason, the request counters, the trace patterns put back after a
%% code reload (`reapplied'), the nodes started from here.
-spec info() -> map() | {error, not_running}.
info() ->
    call(info).

%%%%%%%%%%%%%%%%
%%% REQUESTS %%%
%%%%%%%%%%%%%%%%

%% @doc Open a request in the calling process if tiers run and the sample
%% says so: sets a fresh seq_trace label and calls the start marker.
%% Returns what {@link leave/1} needs, or `untraced'.
-spec enter(term()) -> untraced | {traced, term(), pos_integer()}.
enter(Identity) ->
    case persistent_term:get(?PT, undefined) of
        undefined ->
            untraced;
        {Sample, Counters, _} ->
            case counters:get(Counters, ?ACTIVE) of
                1 ->
                    counters:add(Counters, ?SEEN, 1),
                    case Sample < 1 andalso rand:uniform() > Sample of
                        true ->
                            untraced;
                        false ->
                            counters:add(Counters, ?SAMPLED, 1),
                            Old = seq_trace:get_token(),
                            Label = erlang:unique_integer([positive]),
                            _ = seq_trace:set_token(label, Label),
                            kprof_mark:start(Identity),
                            {traced, Old, Label}
                    end;
                _ ->
                    untraced
            end
    end.

%% @doc Close the request {@link enter/1} opened: the stop marker, then
%% the caller's previous token back. The label is set again first: a
%% process that receives a message without a token loses its own, and a
%% stop marker without one would leave the request open in the sink for
%% ever. When the previous token is an outer request's, the resume marker
%% says so to the sink, or the returns the process makes next would count
%% for the inner request.
-spec leave(untraced | {traced, term(), pos_integer()}) -> ok.
leave(untraced) ->
    ok;
leave({traced, [], Label}) ->
    _ = seq_trace:set_token(label, Label),
    kprof_mark:stop(),
    _ = seq_trace:set_token([]),
    ok;
leave({traced, Old, Label}) ->
    _ = seq_trace:set_token(label, Label),
    kprof_mark:stop(),
    _ = seq_trace:set_token(Old),
    kprof_mark:resume().

%%%%%%%%%%%%%%%%%%
%%% VALIDATION %%%
%%%%%%%%%%%%%%%%%%

%% @doc Validate tiers and options on this node, loading the modules
%% named, and compile the trace patterns and sink commands. Nothing is
%% started.
-spec check(term(), term()) -> {ok, #plan{}} | {error, term()}.
check(Tiers, Opts) ->
    try
        O = check_opts(Opts),
        Checked = check_tiers(Tiers),
        Entries = check_entries(O),
        ok = load(kprof_mark, mark),
        Plan = plan(Checked, Entries, O),
        check_match_specs(Plan#plan.patterns),
        {ok, Plan}
    catch
        throw:{?MODULE, Reason} -> {error, Reason}
    end.

%%%%%%%%%%%%%%%%
%%% PER NODE %%%
%%%%%%%%%%%%%%%%

%% @doc {@link check/2} on this node, without the plan.
-spec node_check(tiers(), opts()) -> ok | {error, term()}.
node_check(Tiers, Opts) ->
    case check(Tiers, Opts) of
        {ok, _} -> ok;
        {error, _} = Error -> Error
    end.

%% @doc Start kprof if needed, validate, and start the tiers on this
%% node only.
-spec node_start(tiers(), opts()) -> ok | {error, term()}.
node_start(Tiers, Opts) ->
    case ensure_kprof() of
        ok ->
            case check(Tiers, maps:remove(nodes, Opts)) of
                {ok, Plan} -> call({start, Plan});
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc Stop the tiers on this node; `undo' also forgets them (a start
%% that failed elsewhere).
-spec node_stop(stop | undo) -> ok | {error, term()}.
node_stop(How) ->
    call({stop, How}).

%% @doc Forget what was recorded on this node.
-spec node_reset() -> ok | {error, term()}.
node_reset() ->
    call(reset).

%% @doc This node's report: the sink's rows (merged over the window's
%% slices when there is a window), times in system time, and the
%% counters of this node, `reapplied' among them: the tiers' trace patterns
%% {@link kprof_guard} put back after a code reload since start (0 if none).
-spec node_report() -> {ok, node_report()} | {error, term()}.
node_report() ->
    call(report).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% GEN_SERVER CALLBACKS %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    process_flag(trap_exit, true),
    {ok, #state{}}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call({start, Plan}, _From, S) ->
    case S#state.active of
        true ->
            {reply, {error, already_started}, S};
        false ->
            case start_tracing(Plan) of
                {ok, Plan1, Counters} ->
                    {reply, ok, started(Plan1, Counters, S)};
                {error, _} = Error ->
                    {reply, Error, S}
            end
    end;
handle_call({stop, How}, _From, S) ->
    S1 = stopped(S),
    S2 = case How of
             undo -> S1#state{plan = undefined, slices = []};
             stop -> S1
         end,
    {reply, ok, S2};
handle_call(reset, _From, S) ->
    case S#state.plan of
        undefined -> {reply, {error, not_started}, S};
        _ -> {reply, ok, reset_state(S)}
    end;
handle_call(report, _From, S) ->
    case S#state.plan of
        undefined ->
            {reply, {error, not_started}, S};
        _ ->
            {Raw, S1} = current_raw(S),
            {reply, {ok, node_report(Raw, S1)}, S1}
    end;
handle_call({set_nodes, Nodes}, _From, S) ->
    {reply, ok, S#state{nodes = Nodes}};
handle_call(nodes, _From, S) ->
    {reply, S#state.nodes, S};
handle_call(info, _From, S) ->
    {reply, state_info(S), S};
handle_call(Other, _From, S) ->
    {reply, {error, {bad_call, Other}}, S}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast({aborted, Reason, Info, Time}, S) ->
    {noreply, aborted(Reason, Info, Time, S)};
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}}.
handle_info({timeout, TRef, poll}, S = #state{timer = TRef, active = true}) ->
    S1 = take_slice(false, S),
    {noreply, S1#state{timer = poll_timer(S1#state.plan)}};
handle_info({kprof_alert, sink_down, Info}, S = #state{active = true}) ->
    %% The VM dropped the tracing to the dead port; the patterns stay.
    {noreply, abort_here(sink_down, Info, S)};
handle_info({'DOWN', MRef, process, _, Reason}, S = #state{sink_mon = MRef}) ->
    S1 = S#state{sink_mon = undefined},
    case S1#state.active of
        true -> {noreply, abort_here(sink_server_down, #{reason => Reason}, S1)};
        false -> {noreply, S1}
    end;
handle_info(_Msg, S) ->
    {noreply, S}.

%% @private
-spec terminate(term(), #state{}) -> ok.
terminate(_Reason, S) ->
    _ = untrace_state(S),
    unpublish().

%% @private
-spec code_change(term(), #state{}, term()) -> {ok, #state{}}.
code_change(_OldVsn, S, _Extra) ->
    {ok, S}.

%%%%%%%%%%%%%
%%% SETUP %%%
%%%%%%%%%%%%%

%% The sink first (it starts counting nothing until events come), then the
%% patterns (full trace's first: the tier patterns replace them on tier
%% functions), then the flags: each step undoes the ones before it.
-spec start_tracing(#plan{}) -> {ok, #plan{}, counters:counters_ref()} | {error, term()}.
start_tracing(Plan0 = #plan{patterns = Patterns}) ->
    case kprof_sink:port() of
        Port when is_port(Port) ->
            case kprof_sink:command({tiers_start, Plan0#plan.sink_specs,
                                     Plan0#plan.sink_opts}) of
                ok ->
                    Watch = set_full_patterns(Plan0#plan.full),
                    Full = [{{M, '_', '_'}, MS} || {module, M, MS, _, _} <- Watch],
                    Plan = Plan0#plan{full_patterns = Full, full_watch = Watch},
                    case set_patterns(Patterns, []) of
                        ok ->
                            %% max_events counts from here: the guard is
                            %% armed after the flags are set.
                            E0 = kprof_guard:events_baseline(Plan#plan.limits),
                            case set_flags(Port) of
                                ok ->
                                    {ok, Plan#plan{events0 = E0}, publish(Plan)};
                                {error, _} = Error ->
                                    remove_patterns(Patterns),
                                    remove_patterns(Full),
                                    _ = kprof_sink:command(tiers_stop),
                                    Error
                            end;
                        {error, _} = Error ->
                            remove_patterns(Full),
                            _ = kprof_sink:command(tiers_stop),
                            Error
                    end;
                Other ->
                    {error, {sink, Other}}
            end;
        {error, Reason} ->
            {error, {sink, Reason}}
    end.

-spec set_patterns([pattern()], [mfa_spec()]) -> ok | {error, term()}.
set_patterns([], _Done) ->
    ok;
set_patterns([{Spec, MS} | Rest], Done) ->
    case catch erlang:trace_pattern(Spec, MS, [local]) of
        N when is_integer(N), N > 0 ->
            set_patterns(Rest, [Spec | Done]);
        Other ->
            remove_patterns(Done),
            {error, {trace_pattern_failed, Spec, Other}}
    end.

%% Full trace: the tier match spec on every function of every loaded
%% module but kprof's own, module by module (each trace_pattern/3 call stops
%% every scheduler for a moment; one call on {'_','_','_'} would stop them
%% for the whole of it), yielding in between. BIFs are left out (`erlang',
%% `erts_internal', and the BIFs of other modules): a traced BIF sends its
%% own return_to, which the sink's chain model does not expect.
%% kprof_guard:module_pattern/3 sets them, and gives the pattern the guard
%% watches for a module (one sentinel function) and puts back the same way
%% after a code reload of it.
-spec set_full_patterns(false | all | [term()]) -> [kprof_guard:pattern()].
set_full_patterns(false) ->
    [];
set_full_patterns(_) ->
    MS = tier_ms(),
    [begin
         W = kprof_guard:module_pattern(M, MS, [local]),
         erlang:yield(),
         W
     end || M <- full_trace_modules()].

%% Every loaded module but kprof's and the BIF modules.
-spec full_trace_modules() -> [module()].
full_trace_modules() ->
    Own = case application:get_key(kprof, modules) of
              {ok, Mods} -> Mods;
              undefined -> []
          end,
    Skip = sets:from_list(Own ++ ?RESERVED_MODULES ++ ?FULL_SKIP, [{version, 2}]),
    lists:sort([M || {M, _} <- code:all_loaded(), not sets:is_element(M, Skip)]).

-spec set_flags(port()) -> ok | {error, term()}.
set_flags(Port) ->
    Tracer = tracer(Port),
    try erlang:trace(all, true, [Tracer | ?FLAGS]) of
        _ -> ok
    catch
        error:Reason ->
            _ = release_ring(),
            {error, {trace_flags_failed, Reason}}
    end.

%% The tracer the processes get: the kprof_tracer NIF writing to the sink's
%% ring (kprof_tracer explains why), unless the application environment says
%% `{tracer, port}' or the NIF is not there; then the sink's port
%% (kprof_sink:tracer/0 decides, and warns when a ring cannot be set up).
-spec tracer(port()) -> {tracer, port()} | {tracer, kprof_tracer, pos_integer()}.
tracer(Port) ->
    case kprof_sink:tracer() of
        {tracer, _, _} = Ring -> Ring;
        {tracer, _} = PortTracer -> PortTracer;
        {error, _} -> {tracer, Port}
    end.

%% The NIF writes no more: every process it traced drops it at its next
%% event. The ring stays the sink's, for the next mode.
-spec release_ring() -> ok.
release_ring() ->
    _ = (catch kprof_tracer:detach()),
    ok.

-spec remove_patterns([mfa_spec() | pattern()]) -> ok.
remove_patterns(Patterns) ->
    lists:foreach(fun({Spec, MS}) when is_list(MS) -> catch erlang:trace_pattern(Spec, false, [local]);
                     (Spec) -> catch erlang:trace_pattern(Spec, false, [local])
                  end, Patterns).

%% Flags and patterns off, the NIF detached: the sink reads what the ring
%% holds before it answers its next command (tiers_stop).
-spec untrace([pattern()]) -> ok.
untrace(Patterns) ->
    untrace_now(Patterns),
    release_ring().

%% What abort/2 does at once: nothing that waits for the sink, which may be
%% seconds behind (waiting for it there kept the patterns on for the whole
%% command timeout after an overload). The NIF writes no more, flags and
%% patterns come off.
-spec untrace_now([pattern()]) -> ok.
untrace_now(Patterns) ->
    _ = (catch kprof_tracer:detach()),
    _ = (catch erlang:trace(all, false, ?FLAGS)),
    remove_patterns(Patterns).

%% The guard first: while it is armed it puts back the patterns it sees
%% gone (it takes that for a code reload).
-spec untrace_state(#state{}) -> ok.
untrace_state(#state{active = true, plan = #plan{patterns = Patterns, full_patterns = Full},
                     counters = C}) ->
    counters:put(C, ?ACTIVE, 0),
    disarm_guard(),
    untrace(Patterns ++ Full);
untrace_state(_) ->
    ok.

%% The request path reads this; replacing it costs a global GC, so it
%% changes only at start and stop.
-spec publish(#plan{}) -> counters:counters_ref().
publish(#plan{sample = Sample, patterns = Patterns, full_patterns = Full}) ->
    C = counters:new(4, [write_concurrency]),
    counters:put(C, ?ACTIVE, 1),
    %% abort/2 untraces these: full trace's too.
    persistent_term:put(?PT, {Sample, C, Patterns ++ Full}),
    C.

-spec unpublish() -> ok.
unpublish() ->
    _ = persistent_term:erase(?PT),
    ok.

-spec started(#plan{}, counters:counters_ref(), #state{}) -> #state{}.
started(Plan, Counters, S) ->
    _ = kprof_sink:subscribe(),
    demonitor_sink(S),
    MRef = case whereis(kprof_sink) of
               undefined -> undefined;
               Pid -> erlang:monitor(process, Pid)
           end,
    arm_guard(Plan, Counters),
    Now = now_ns(),
    S#state{plan = Plan, active = true, since = Now, until = undefined,
            counters = Counters, base = sink_base(), slices = [], slice_from = Now,
            last_ts = undefined, quiet = false,
            timer = poll_timer(Plan), aborted = false, sink_mon = MRef}.

-spec stopped(#state{}) -> #state{}.
stopped(S = #state{active = true}) ->
    untrace_state(S),
    unpublish(),
    _ = kprof_sink:command(tiers_stop),
    S1 = final_slice(S),
    cancel_timer(S1#state{active = false, until = now_ns()});
stopped(S) ->
    %% Aborted: the flags and patterns are off already.
    unpublish(),
    S.

-spec aborted(term(), term(), integer(), #state{}) -> #state{}.
aborted(Reason, Info, Time, S = #state{active = true}) ->
    %% Again, after the guard is disarmed: abort/2 untraced from its
    %% caller, and the guard may have put patterns back since.
    untrace_state(S),
    _ = kprof_sink:command(tiers_stop),
    S1 = final_slice(S),
    cancel_timer(S1#state{active = false, until = now_ns(), aborted = {Reason, Info, Time}});
aborted(_Reason, _Info, _Time, S) ->
    S.

-spec abort_here(term(), term(), #state{}) -> #state{}.
abort_here(Reason, Info, S = #state{counters = C}) ->
    counters:put(C, ?ACTIVE, 0),
    aborted(Reason, Info, erlang:system_time(millisecond), S).

-spec reset_state(#state{}) -> #state{}.
reset_state(S = #state{counters = C}) ->
    _ = kprof_sink:command(tier_reset),
    _ = [counters:put(C, I, 0) || C =/= undefined, I <- [?SEEN, ?SAMPLED]],
    Now = now_ns(),
    Until = case S#state.active of
                true -> undefined;
                false -> Now
            end,
    S#state{since = Now, until = Until, base = sink_base(), slices = [], slice_from = Now}.

%% The guard watches for overload and limits, and calls abort/2; it counts
%% the patterns it puts back after a code reload in `Counters' (the report's
%% `reapplied').
%% Full trace's module patterns are given as `{module, ...}' patterns: the
%% guard checks one function of each module (a reload replaces the whole
%% module), puts the module's pattern back the way it was set, then the
%% tier patterns on its functions. A catch-all goes with them: the guard
%% never re-applies it (`'_'' is no loaded module) and, should it abort,
%% clears every local pattern with it in one call rather than module by
%% module (after kprof_tiers:abort/2 has removed them itself).
-spec arm_guard(#plan{}, counters:counters_ref()) -> ok.
arm_guard(#plan{patterns = Patterns, limits = Limits, full = Full, full_watch = Watch,
                events0 = E0}, Counters) ->
    CatchAll = case Full of
                   false -> [];
                   _ -> [{{'_', '_', '_'}, tier_ms(), [local]}]
               end,
    Arm0 = #{abort => fun ?MODULE:abort/2, owner => self(),
             patterns => Watch ++ [{MFA, MS, [local]} || {MFA, MS} <- Patterns] ++ CatchAll,
             reapplied => fun(_MFA) -> counters:add(Counters, ?REAPPLIED, 1) end},
    Arm = case E0 of
              undefined -> Arm0;
              _ -> Arm0#{events0 => E0}
          end,
    case whereis(kprof_guard) of
        undefined ->
            ok;
        _ ->
            Limits1 = case map_size(Limits) of
                          0 -> #{};
                          _ -> #{limits => element(2, kprof_guard:validate_limits(Limits))}
                      end,
            case catch kprof_guard:arm(tiers, maps:merge(Arm, Limits1)) of
                ok -> ok;
                Other -> logger:warning("kprof_tiers: the guard refused to arm: ~p", [Other])
            end
    end.

-spec disarm_guard() -> ok.
disarm_guard() ->
    _ = (catch kprof_guard:disarm(tiers)),
    ok.

-spec demonitor_sink(#state{}) -> ok.
demonitor_sink(#state{sink_mon = undefined}) -> ok;
demonitor_sink(#state{sink_mon = MRef}) -> erlang:demonitor(MRef, [flush]), ok.

-spec ensure_kprof() -> ok | {error, term()}.
ensure_kprof() ->
    kprof:start().

%%% Windows

-spec poll_timer(#plan{}) -> undefined | reference().
poll_timer(#plan{window = undefined}) ->
    undefined;
poll_timer(#plan{window = W}) ->
    erlang:start_timer(max(10, round(W * 1000 / ?SLICES)), self(), poll).

-spec cancel_timer(#state{}) -> #state{}.
cancel_timer(S = #state{timer = undefined}) ->
    S;
cancel_timer(S = #state{timer = TRef}) ->
    _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
    S#state{timer = undefined}.

%% Take what the sink has (and clear it) as the newest slice; drop slices
%% older than the window. The sink waits for an event more than `grace_ms'
%% after a request's end before it finalises it; when no event came
%% between the last two polls, no straggler is coming either, and this
%% poll flushes (or requests ended before a quiet spell would wait for
%% the next event and land in a later slice).
-spec take_slice(boolean(), #state{}) -> #state{}.
take_slice(Flush, S = #state{slices = Slices, slice_from = From, plan = Plan, quiet = Quiet}) ->
    Now = now_ns(),
    {Raw, LastTs} = sink_report({tier_report, Flush orelse Quiet, true}, Plan),
    S1 = S#state{slices = [{From, Now, Raw} | Slices], slice_from = Now,
                 last_ts = LastTs, quiet = LastTs =:= S#state.last_ts},
    prune(S1, Now).

-spec final_slice(#state{}) -> #state{}.
final_slice(S = #state{plan = #plan{window = undefined}}) -> S;
final_slice(S) -> take_slice(true, S).

-spec prune(#state{}, integer()) -> #state{}.
prune(S = #state{plan = #plan{window = W}, slices = Slices}, Now) ->
    WindowNs = round(W * 1.0e9),
    Slack = WindowNs div (2 * ?SLICES),
    S#state{slices = [Sl || {T0, _, _} = Sl <- Slices, T0 >= Now - WindowNs - Slack]}.

%% The sink's report now: the window's slices merged, or everything since
%% start/reset.
-spec current_raw(#state{}) -> {map(), #state{}}.
current_raw(S = #state{plan = Plan = #plan{window = undefined}}) ->
    {Raw, _} = sink_report({tier_report, true}, Plan),
    {Raw, S};
current_raw(S = #state{active = Active, plan = Plan}) ->
    S1 = case Active of
             true -> take_slice(true, S);
             false -> S
         end,
    Raws = [Raw || {_, _, Raw} <- lists:reverse(S1#state.slices)],
    {kprof_report:merge_raw(slices, Raws, Plan#plan.slow_max, length(Plan#plan.tiers)), S1}.

%% A sink report with its times in system time (ns), and the sink's
%% `last_ts' as it said it; an empty one when the sink lost its tiers (it
%% restarted).
-spec sink_report(term(), #plan{}) -> {map(), term()}.
sink_report(Cmd, #plan{tiers = Tiers}) ->
    case kprof_sink:command(Cmd) of
        #{rows := _, last_ts := LastTs} = Raw -> {to_system_time(Raw), LastTs};
        _ -> {kprof_report:empty_raw(length(Tiers)), undefined}
    end.

-spec to_system_time(map()) -> map().
to_system_time(Raw = #{slow := Slow}) ->
    Offset = erlang:time_offset(nanosecond),
    Sys = fun(undefined) -> undefined; (T) -> T + Offset end,
    Raw#{first_ts => Sys(maps:get(first_ts, Raw)),
         last_ts => Sys(maps:get(last_ts, Raw)),
         slow => [{Id, Pid, Sys(Start), Wall, Calls, Self, Incl}
                  || {Id, Pid, Start, Wall, Calls, Self, Incl} <- Slow]}.

-spec node_report(map(), #state{}) -> node_report().
node_report(Raw, S = #state{plan = Plan, counters = C}) ->
    Stats = sink_stats(),
    Now = case S#state.until of
              undefined -> now_ns();
              Until -> Until
          end,
    Traced = case {Plan#plan.window, S#state.slices} of
                 {undefined, _} -> Now - S#state.since;
                 {_, []} -> Now - S#state.since;
                 {_, Slices} -> Now - lists:min([T0 || {T0, _, _} <- Slices])
             end,
    Get = fun(I) -> count(C, I) end,
    #{node => node(),
      tiers => [Name || {Name, _} <- Plan#plan.tiers],
      raw => Raw,
      seen => Get(?SEEN),
      sampled => Get(?SAMPLED),
      traced_ns => max(0, Traced),
      window => Plan#plan.window,
      active => S#state.active,
      aborted => S#state.aborted,
      sink_dropped => delta(dropped, Stats, S#state.base),
      sink_dropped_pids => delta(dropped_pids, Stats, S#state.base),
      sink_dropped_mfas => delta(dropped_mfas, Stats, S#state.base),
      sink_dropped_names => delta(dropped_names, Stats, S#state.base),
      full_trace => full_report(Plan),
      bytes => delta(bytes, Stats, S#state.base),
      reapplied => Get(?REAPPLIED),
      slow_max => Plan#plan.slow_max}.

%% The sink's full-trace aggregates (since start or reset, windows aside),
%% or `undefined' without full trace.
-spec full_report(#plan{}) -> undefined | map().
full_report(#plan{full = false}) ->
    undefined;
full_report(_Plan) ->
    case kprof_sink:command({tier_full_report, ?FULL_TOP}) of
        #{identities := _} = Full -> Full;
        _ -> undefined
    end.

-spec count(undefined | counters:counters_ref(), pos_integer()) -> non_neg_integer().
count(undefined, _I) -> 0;
count(C, I) -> counters:get(C, I).

-spec sink_stats() -> map().
sink_stats() ->
    case kprof_sink:command(stats) of
        #{} = Stats -> Stats;
        _ -> #{}
    end.

-spec sink_base() -> #{atom() => non_neg_integer()}.
sink_base() ->
    maps:with([dropped, dropped_pids, dropped_mfas, dropped_names, bytes], sink_stats()).

%% Since start or reset; a sink reset or restart in between starts again
%% from zero.
-spec delta(atom(), map(), map()) -> non_neg_integer().
delta(Key, Stats, Base) ->
    Now = maps:get(Key, Stats, 0),
    Then = maps:get(Key, Base, 0),
    case Now >= Then of
        true -> Now - Then;
        false -> Now
    end.

-spec state_info(#state{}) -> map().
state_info(#state{plan = Plan, active = Active, nodes = Nodes, aborted = Aborted,
                  counters = C}) ->
    Counts = case C of
                 undefined -> #{seen => 0, sampled => 0, reapplied => 0};
                 _ -> #{seen => counters:get(C, ?SEEN), sampled => counters:get(C, ?SAMPLED),
                        reapplied => counters:get(C, ?REAPPLIED)}
             end,
    Tiers = case Plan of
                undefined -> [];
                #plan{tiers = T} -> T
            end,
    Counts#{active => Active, tiers => Tiers, nodes => Nodes, aborted => Aborted,
            sample => case Plan of undefined -> undefined; _ -> Plan#plan.sample end,
            window => case Plan of undefined -> undefined; _ -> Plan#plan.window end}.

-spec now_ns() -> integer().
now_ns() ->
    erlang:monotonic_time(nanosecond).

%%% Several nodes

%% Every node validates before any starts; a node that fails to start
%% stops (and forgets) the ones started before it.
-spec start_nodes([node()], tiers(), opts()) -> ok | {error, term()}.
start_nodes(Nodes, Tiers, Opts) ->
    Remote = [N || N <- Nodes, N =/= node()],
    case first_error([on_node(N, node_check, [Tiers, Opts]) || N <- Remote]) of
        ok ->
            case start_each(Nodes, Tiers, Opts, []) of
                ok -> call({set_nodes, Nodes});
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

-spec start_each([node()], tiers(), opts(), [node()]) -> ok | {error, term()}.
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
    apply(?MODULE, F, Args);
on_node(N, F, Args) ->
    try erpc:call(N, ?MODULE, F, Args, ?TIMEOUT) of
        {error, Reason} -> {error, {node, N, Reason}};
        Other -> Other
    catch
        Class:Reason -> {error, {node, N, {Class, Reason}}}
    end.

-spec first_error([term()]) -> ok | {error, term()}.
first_error([]) -> ok;
first_error([{error, _} = Error | _]) -> Error;
first_error([_ | Rest]) -> first_error(Rest).

-spec each_node(fun((node()) -> term())) -> ok | {error, term()}.
each_node(Fun) ->
    case started_nodes() of
        {ok, Nodes} -> first_error([Fun(N) || N <- Nodes]);
        {error, _} = Error -> Error
    end.

-spec started_nodes() -> {ok, [node()]} | {error, term()}.
started_nodes() ->
    case call(nodes) of
        [] -> {ok, [node()]};
        Nodes when is_list(Nodes) -> {ok, Nodes};
        {error, _} = Error -> Error
    end.

-spec report_nodes(report_opts()) -> ok | {ok, term()} | {error, term()}.
report_nodes(Opts) ->
    Nodes = case maps:find(nodes, Opts) of
                {ok, Ns} -> {ok, Ns};
                error -> started_nodes()
            end,
    case Nodes of
        {ok, Ns1} ->
            Replies = [on_node(N, node_report, []) || N <- Ns1],
            case first_error(Replies) of
                ok -> format(kprof_report:build([R || {ok, R} <- Replies], Opts), Opts);
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

-spec format({ok, kprof_report:report()} | {error, term()}, report_opts()) ->
          ok | {ok, term()} | {error, term()}.
format({ok, Report}, Opts) ->
    case maps:get(format, Opts, text) of
        text -> io:put_chars(kprof_report:text(Report, Opts));
        term -> {ok, Report};
        json -> {ok, kprof_report:json(Report)}
    end;
format({error, _} = Error, _Opts) ->
    Error.

-spec call(term()) -> term().
call(Request) ->
    try
        gen_server:call(?SERVER, Request, ?TIMEOUT)
    catch
        exit:{noproc, _} -> {error, not_running};
        exit:{timeout, _} -> {error, timeout};
        exit:{Reason, _} -> {error, {not_running, Reason}}
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% VALIDATION: options, tiers, entries, identity %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

-spec fail(term()) -> no_return().
fail(Reason) ->
    throw({?MODULE, Reason}).

-spec check_opts(term()) -> opts().
check_opts(Opts) when is_map(Opts) ->
    maps:foreach(fun check_opt/2, Opts),
    case maps:is_key(identity, Opts) andalso not maps:is_key(entry, Opts) of
        true -> fail({identity_without_entry, maps:get(identity, Opts)});
        false -> Opts
    end;
check_opts(Opts) ->
    fail({bad_options, Opts}).

-spec check_opt(term(), term()) -> ok.
check_opt(sample, S) when is_number(S), S > 0, S =< 1 -> ok;
check_opt(slow_ms, N) when is_number(N), N >= 0 -> ok;
check_opt(slow_max, N) when is_integer(N), N >= 0, N =< 10000 -> ok;
check_opt(window, W) when is_number(W), W >= 0.1, W =< 86400 -> ok;
check_opt(entry, E) when is_tuple(E) -> ok;
check_opt(entry, [_ | _]) -> ok;
check_opt(identity, mfa) -> ok;
check_opt(identity, {arg, N}) when is_integer(N), N >= 1, N =< 255 -> ok;
check_opt(identity, F) when is_function(F, 1) -> ok;
check_opt(identity, {ms, [_ | _]}) -> ok;
check_opt(nodes, [_ | _] = Nodes) ->
    case lists:all(fun is_atom/1, Nodes) of
        true -> ok;
        false -> fail({bad_option, {nodes, Nodes}})
    end;
check_opt(max_identities, N) when is_integer(N), N > 0, N =< 100000 -> ok;
check_opt(max_inflight, N) when is_integer(N), N > 0, N =< 10000000 -> ok;
check_opt(max_request_events, N) when is_integer(N), N > 0, N =< 100000000 -> ok;
check_opt(grace_ms, N) when is_integer(N), N >= 0, N =< 3600000 -> ok;
check_opt(full_trace, V) ->
    case full_selection(V) of
        error -> fail({bad_option, {full_trace, V}});
        _ -> ok
    end;
check_opt(full_trace_max_events, N) when is_integer(N), N > 0, N =< 100000000 -> ok;
check_opt(full_trace_max_nodes, N) when is_integer(N), N >= 16, N =< 1 bsl 26 -> ok;
check_opt(full_trace_max_identities, N) when is_integer(N), N > 0, N =< 100000 -> ok;
check_opt(K, V) ->
    case lists:member(K, ?GUARD_KEYS) of
        true ->
            case kprof_guard:validate_limits(#{K => V}) of
                {ok, _} -> ok;
                {error, _} -> fail({bad_option, {K, V}})
            end;
        false ->
            fail({bad_option, {K, V}})
    end.

%% `all', a list of identities, or one identity; `false' is off. An empty
%% or improper list and `true' are mistakes.
-spec full_selection(term()) -> false | all | [term()] | error.
full_selection(false) -> false;
full_selection(all) -> all;
full_selection(true) -> error;
full_selection([]) -> error;
full_selection(L) when is_list(L) ->
    try length(L) of
        _ -> lists:usort(L)
    catch
        error:badarg -> error
    end;
full_selection(Identity) -> [Identity].

-spec check_report_opts(term()) -> ok | {error, term()}.
check_report_opts(Opts) when is_map(Opts) ->
    Bad = [{K, V} || {K, V} <- lists:sort(maps:to_list(Opts)), not valid_report_opt(K, V)],
    case Bad of
        [] -> ok;
        [KV | _] -> {error, {bad_option, KV}}
    end;
check_report_opts(Opts) ->
    {error, {bad_options, Opts}}.

-spec valid_report_opt(term(), term()) -> boolean().
valid_report_opt(format, F) -> lists:member(F, [text, term, json]);
valid_report_opt(time, T) -> lists:member(T, [self, inclusive]);
valid_report_opt(nodes, [_ | _] = Ns) -> lists:all(fun is_atom/1, Ns);
valid_report_opt(limit, infinity) -> true;
valid_report_opt(limit, N) -> is_integer(N) andalso N > 0;
valid_report_opt(_, _) -> false.

%% [{Name, [{Spec, [MFA]}]}], every MFA in one tier only.
-spec check_tiers(term()) -> [{tier_name(), [{mfa_spec(), [mfa()]}]}].
check_tiers(Tiers) when not is_list(Tiers) ->
    fail({bad_tiers, Tiers});
check_tiers([]) ->
    fail(no_tiers);
check_tiers(Tiers) ->
    N = try length(Tiers) catch error:badarg -> fail({bad_tiers, Tiers}) end,
    N =< ?MAX_TIERS orelse fail({too_many_tiers, N, ?MAX_TIERS}),
    Checked = [check_tier(T) || T <- Tiers],
    Names = [Name || {Name, _} <- Checked],
    case Names -- lists:usort(Names) of
        [] -> ok;
        [Dup | _] -> fail({duplicate_tier, Dup})
    end,
    _ = lists:foldl(fun no_overlap/2, #{},
                    [{Name, Spec, MFA} || {Name, Specs} <- Checked,
                                          {Spec, MFAs} <- Specs, MFA <- MFAs]),
    Checked.

-spec check_tier(term()) -> {tier_name(), [{mfa_spec(), [mfa()]}]}.
check_tier({Name, Specs}) when is_atom(Name), is_list(Specs) ->
    lists:member(Name, ?RESERVED_NAMES) andalso fail({reserved_tier_name, Name}),
    Specs =:= [] andalso fail({empty_tier, Name}),
    {Name, [{Spec, expand(Name, Spec)} || Spec <- lists:usort(Specs)]};
check_tier(Tier) ->
    fail({bad_tier, Tier}).

-spec no_overlap({tier_name(), mfa_spec(), mfa()}, map()) -> map().
no_overlap({Name, Spec, MFA}, Seen) ->
    case Seen of
        #{MFA := {Name, _}} -> Seen;
        #{MFA := {Other, OtherSpec}} ->
            fail({overlapping_tiers, MFA, {Other, OtherSpec}, {Name, Spec}});
        _ -> Seen#{MFA => {Name, Spec}}
    end.

%% The functions a spec names; `Where' (a tier or `entry') names the
%% culprit.
-spec expand(atom(), term()) -> [mfa()].
expand(Where, {M, F, A} = Spec) when is_atom(M), M =/= '_', is_atom(F),
                                     (A =:= '_' orelse (is_integer(A) andalso A >= 0
                                                        andalso A =< 255)),
                                     (F =/= '_' orelse A =:= '_') ->
    lists:member(M, ?RESERVED_MODULES) andalso fail({reserved_module, Where, M}),
    ok = load(M, Where),
    Fns = M:module_info(functions),
    MFAs = case {F, A} of
               {'_', '_'} -> [{M, Fn, Ar} || {Fn, Ar} <- Fns];
               {_, '_'} -> [{M, F, Ar} || {Fn, Ar} <- Fns, Fn =:= F];
               _ -> [{M, F, A} || lists:member({F, A}, Fns)]
           end,
    MFAs =/= [] orelse fail({undefined_function, Where, Spec}),
    MFAs;
expand(Where, Spec) ->
    fail({bad_mfa_spec, Where, Spec}).

-spec load(module(), atom()) -> ok.
load(M, Where) ->
    case code:ensure_loaded(M) of
        {module, M} -> ok;
        {error, nofile} -> fail({unknown_module, Where, M});
        {error, Why} -> fail({module_not_loaded, Where, M, Why})
    end.

%% [{Spec, [MFA]}] of option `entry'.
-spec check_entries(opts()) -> [{mfa_spec(), [mfa()]}].
check_entries(#{entry := Entry}) ->
    Specs = case Entry of
                [_ | _] -> Entry;
                _ -> [Entry]
            end,
    [{Spec, expand(entry, Spec)} || Spec <- lists:usort(Specs)];
check_entries(_) ->
    [].

%%% Match specs (doc/tiers.md)

-spec tier_ms() -> [tuple()].
tier_ms() ->
    [{'_', [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}}}}]}].

-spec start_ms() -> [tuple()].
start_ms() ->
    [{['$1'], [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}, '$1'}}}]}].

%% An entry call opens a request itself: no is_seq_trace guard.
-spec entry_ms(term(), list(), term()) -> tuple().
entry_ms(Head, Guards, none) ->
    {Head, Guards, [{set_seq_token, label, {self}},
                    {message, {{{get_seq_token}, {caller}}}}]};
entry_ms(Head, Guards, IdentityExpr) ->
    {Head, Guards, [{set_seq_token, label, {self}},
                    {message, {{{get_seq_token}, {caller}, IdentityExpr}}}]}.

-spec plan([{tier_name(), [{mfa_spec(), [mfa()]}]}], [{mfa_spec(), [mfa()]}], opts()) ->
          #plan{}.
plan(Checked, Entries, O) ->
    Indexed = lists:zip(lists:seq(0, length(Checked) - 1), Checked),
    TierPatterns = [{Spec, tier_ms()} || {_, {_, Specs}} <- Indexed, {Spec, _} <- Specs],
    %% resume/0 is in no sink spec: its frame counts as `other'.
    Marks = [{{kprof_mark, start, 1}, start_ms()}, {{kprof_mark, stop, 0}, tier_ms()},
             {{kprof_mark, resume, 0}, tier_ms()}],
    SinkSpecs = [{M, F, A, I} || {I, {_, Specs}} <- Indexed, {{M, F, A}, _} <- Specs]
        ++ [{kprof_mark, start, 1, start}, {kprof_mark, stop, 0, stop},
            {kprof_mark, resume, 0, traced}]
        ++ [{M, F, A, entry} || {{M, F, A}, _} <- Entries],
    SlowMax = maps:get(slow_max, O, 20),
    #plan{tiers = [{Name, [Spec || {Spec, _} <- Specs]} || {Name, Specs} <- Checked],
          patterns = TierPatterns ++ Marks ++ entry_patterns(Entries, O),
          sink_specs = SinkSpecs,
          sink_opts = sink_opts(O, SlowMax),
          full = full_selection(maps:get(full_trace, O, false)),
          sample = maps:get(sample, O, 1.0),
          window = maps:get(window, O, undefined),
          slow_max = SlowMax,
          limits = maps:with(?GUARD_KEYS, O),
          nodes = dedup(maps:get(nodes, O, [node()]))}.

%% Without duplicates, in the order given (nodes start in that order).
-spec dedup([node()]) -> [node()].
dedup(Nodes) ->
    lists:reverse(lists:foldl(fun(N, Acc) ->
                                      case lists:member(N, Acc) of
                                          true -> Acc;
                                          false -> [N | Acc]
                                      end
                              end, [], Nodes)).

-spec sink_opts(opts(), non_neg_integer()) -> [{atom(), term()}].
sink_opts(O, SlowMax) ->
    Limits = [{K, V} || K <- [max_identities, max_inflight, max_request_events, grace_ms],
                        {ok, V} <- [maps:find(K, O)]],
    Full = case full_selection(maps:get(full_trace, O, false)) of
               false -> [];
               Sel -> [{full_trace, Sel} |
                       [{SinkKey, V} || {K, SinkKey} <- [{full_trace_max_events, full_max_events},
                                                         {full_trace_max_nodes, full_max_nodes},
                                                         {full_trace_max_identities,
                                                          full_max_identities}],
                                        {ok, V} <- [maps:find(K, O)]]]
           end,
    Slow = case maps:find(slow_ms, O) of
               {ok, Ms} -> [{slow_us, round(Ms * 1000)}, {slow_max, SlowMax}];
               error -> []
           end,
    Limits ++ Slow ++ Full.

-spec entry_patterns([{mfa_spec(), [mfa()]}], opts()) -> [pattern()].
entry_patterns([], _O) ->
    [];
entry_patterns(Entries, O) ->
    case maps:get(identity, O, mfa) of
        mfa ->
            [{Spec, [entry_ms('_', [], none)]} || {Spec, _} <- Entries];
        {arg, N} ->
            Var = list_to_atom("$" ++ integer_to_list(N)),
            [begin
                 N =< A orelse fail({bad_identity, {arg, N}, MFA}),
                 Head = [case I of N -> Var; _ -> '_' end || I <- lists:seq(1, A)],
                 {MFA, [entry_ms(Head, [], Var)]}
             end || MFA = {_, _, A} <- all_mfas(Entries)];
        Identity ->
            Clauses = identity_clauses(Identity),
            [{MFA, [entry_ms(H, G, E) || {H, G, E} <- fit_clauses(Clauses, MFA)]}
             || MFA <- all_mfas(Entries)]
    end.

-spec all_mfas([{mfa_spec(), [mfa()]}]) -> [mfa()].
all_mfas(Entries) ->
    lists:usort([MFA || {_, MFAs} <- Entries, MFA <- MFAs]).

%% The clauses of an identity fun or match spec, each with the match-spec
%% form of its last body expression.
-spec identity_clauses(term()) -> [{term(), list(), term()}].
identity_clauses({ms, MS}) ->
    ms_clauses(MS, {ms, MS});
identity_clauses(Fun) when is_function(Fun, 1) ->
    case erl_eval:fun_data(Fun) of
        {fun_data, Imports, Clauses} ->
            case ms_transform:transform_from_shell(dbg, Clauses, Imports) of
                {error, [{_, [{_, _, Code} | _]} | _], _} ->
                    fail({identity_fun_not_convertible,
                          lists:flatten(ms_transform:format_error(Code))});
                MS when is_list(MS) ->
                    ms_clauses(MS, Fun);
                Other ->
                    fail({identity_fun_not_convertible, Other})
            end;
        false ->
            fail({identity_fun_not_convertible,
                  "only a fun typed in the shell can be converted (as dbg:fun2ms/1 "
                  "does); in compiled code use identity => {arg, N}, or "
                  "identity => {ms, dbg:fun2ms(fun([A, _]) -> A end)} with "
                  "-include_lib(\"stdlib/include/ms_transform.hrl\")"})
    end.

-spec ms_clauses(term(), term()) -> [{term(), list(), term()}].
ms_clauses(MS, Culprit) when is_list(MS) ->
    [case Clause of
         {Head, Guards, [_ | _] = Body} when is_list(Guards) ->
             {Head, Guards, unwrap_message(lists:last(Body))};
         _ ->
             fail({bad_identity, Culprit})
     end || Clause <- MS];
ms_clauses(_, Culprit) ->
    fail({bad_identity, Culprit}).

%% `fun([A]) -> message(A) end' means the same as `fun([A]) -> A end'.
-spec unwrap_message(term()) -> term().
unwrap_message({message, Expr}) -> Expr;
unwrap_message(Expr) -> Expr.

%% A clause whose head is an argument list must have the entry's arity.
-spec fit_clauses([{term(), list(), term()}], mfa()) -> [{term(), list(), term()}].
fit_clauses(Clauses, {_, _, A} = MFA) ->
    Fit = [C || {H, _, _} = C <- Clauses, not is_list(H) orelse length(H) =:= A],
    Fit =/= [] orelse fail({bad_identity, {arity_mismatch, MFA}}),
    Fit.

-spec check_match_specs([pattern()]) -> ok.
check_match_specs(Patterns) ->
    lists:foreach(fun({Spec, MS}) ->
                          case erlang:match_spec_test([], MS, trace) of
                              {ok, _, _, _} -> ok;
                              {error, Errors} -> fail({bad_match_spec, Spec, Errors})
                          end
                  end, Patterns).
