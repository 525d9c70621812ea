%%% @doc Tiered request profiling: where the time of each kind of request
%%% goes, tier by tier (HTTP handling, database, templating, ...).
%%%
%%% Users call {@link kprof:start_tiers/2}, {@link kprof:request/2} and
%%% {@link kprof:report/1}. This module is the server that owns the state
%%% of the tiers on its node (a gen_server under `kprof_sup'), and the
%%% request path ({@link enter/1}, {@link leave/1}). Its helpers, one job
%%% each: {@link kprof_tiers_plan} validates and compiles the tiers and
%%% options, {@link kprof_tiers_trace} sets the tracing up and takes it off,
%%% {@link kprof_tiers_cluster} makes the calls to every node the tiers
%%% run on, {@link kprof_tiers_window} polls the sink (the server's state
%%% in kprof_tiers_state.hrl) and makes the report's data of it, {@link
%%% kprof_tiers_full} writes full trace's flame graphs. doc/tiers.md is the
%%% contract with the sink.
%%%
%%% == How a request is traced ==
%%%
%%% ```
%%%  kprof:request(Id, Fun)          seq_trace label L on the caller,
%%%    kprof_mark:start(Id) ------->  call {Token(L), Caller, Id}       --+
%%%    Fun()                                                              |
%%%      my_http:handle/1 (tier 0) -> call + return_to, label L         --+
%%%      gen_server:call(Db, Q) ....  the message carries L, so the       +--> port --> kprof_sink
%%%        my_db:query/1 (tier 1) -> call + return_to in Db, label L   --+    (groups by L,
%%%    kprof_mark:stop() ---------->  call {Token(L), Caller}           --+     times tiers)
%%% '''
%%% Time goes to the most recently opened frame still open in any process
%%% of the request (doc/tiers.md): while `my_http:handle/1' waits for the db
%%% server, `my_db:query/1' has the time once the server runs it; until then
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
%%%     is polled every tenth of the window (at least once a second) and the
%%%     last ten slices are merged.</li>
%%% <li>`entry': an MFA spec or a list of them whose calls open a request
%%%     by themselves (for servers whose entry point cannot be wrapped);
%%%     `identity' (`mfa'): the request identity of an entry call:
%%%     `mfa', `{arg, N}' (the N-th argument, as it is: it goes into every
%%%     row and text of the report, so an argument holding headers, a token or
%%%     a request record puts them there; give a match spec that keeps the
%%%     route instead, doc/tiers.md "The identity is what the report shows"),
%%%     a one-argument fun typed in
%%%     the shell (converted like `dbg:fun2ms/1': `fun([Req, _]) ->
%%%     element(2, Req) end'; its last expression is the identity), or
%%%     `{ms, MatchSpec}' for compiled code, e.g. `{ms,
%%%     dbg:fun2ms(fun([Req, _]) -> element(2, Req) end)}' with the
%%%     ms_transform header included. A compiled fun (an Elixir `fn' is
%%%     one) gives `{error, {identity_fun_not_convertible, Hint}}', the
%%%     Hint spelling out the literal match spec to give instead for the
%%%     entry's arity, in Erlang and in Elixir. Entry calls are not
%%%     sampled.</li>
%%% <li>`nodes' (`[node()]'): start on every node, all or none, except
%%%     that a node that cannot be reached is left out (and named in the
%%%     result); a node down later is named in the report's `missing'.</li>
%%% <li>`max_identities' (200), `max_inflight' (20000),
%%%     `max_request_events' (20000), `grace_ms' (100), `max_request_ms'
%%%     (60000: a request open longer, say of a killed process, is dropped
%%%     and counted as abandoned): the sink's limits (doc/tiers.md).</li>
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
%%% <li>Tiers and flame captures do not run together: both set local call
%%%     patterns, and a capture's end clears them all. The sink decides, in
%%%     the order of its commands: `start_tiers' while a capture holds its
%%%     slot is `{error, {busy, flame}}', a capture while the tiers run
%%%     `{error, {busy, tiers}}'.</li>
%%% <li>What the server sets in the VM is written down first, in
%%%     {@link kprof_records} (the plan, the sink's port, full trace's
%%%     modules), and the record is kept with what the report needs (the
%%%     last poll's rows, the counters) until tracing is off. Killed, the
%%%     server is restarted by `kprof_sup', and its successor's `init/1'
%%%     turns off what the record says: the flags of every process whose
%%%     tracer is kprof's (the sink's port or the tracer NIF), the plan's
%%%     patterns and full trace's module patterns, the guard's watch, the
%%%     tracer NIF's session; it tells the sink `tiers_stop' and takes its
%%%     rows once more. The report shows the run aborted, `kprof_tiers
%%%     restarted' and what was turned off; {@link stop/0} then returns
%%%     `{error, {already_stopped, #{reason => kprof_tiers_restarted,
%%%     undone => #{processes => N, patterns => M}}}}'. Exits are trapped:
%%%     at a shutdown `terminate/2' turns the tracing off.</li>
%%% <li>The server polls its sink at least once a second while tracing is
%%%     on (in a process of its own: it never waits for the sink) and keeps
%%%     the rows and counts of the last answer. A report waits at most 2 s
%%%     for a fresh answer: a sink that does not answer by then gives the
%%%     last poll's rows flagged `incomplete' (reason `no_answer', and as of
%%%     when), a sink that died gives them with reason `sink_died': what it
%%%     read after that poll is lost, and the header says so. {@link
%%%     report/1} returns within 6 s and the time to build the report,
%%%     whatever the sinks do; a node that does not answer by then is an
%%%     error.</li>
%%% <li>No loss is silent: the report counts the requests and events the
%%%     sink's caps dropped, the trace messages it could not record, the
%%%     events the tracer NIF lost to a full ring, could not encode (an
%%%     identity too big for a record) or that the sink could not resolve
%%%     (its tables full), in `dropped' and line by line
%%%     ({@link kprof_report}).</li>
%%% </ul>
-module(kprof_tiers).
-behaviour(gen_server).

-include("kprof_tiers.hrl").
-include("kprof_tiers_state.hrl").

%% PUBLIC (behind kprof:start_tiers/2, stop_tiers/0, reset/0, report/1)
-export([start_link/0, start/2, stop/0, reset/0, report/1,
         abort/1, abort/2, info/0, full_trace_flame/2]).
%% REQUESTS (kprof:request/2, set_token/1, clear_token/0)
-export([enter/1, leave/1]).
%% PER NODE: called through erpc (kprof_tiers_cluster) by the node the tiers
%% were started from
-export([node_check/2, node_start/2, node_stop/1, node_reset/0, node_report/0]).
%% The server's calls (kprof_tiers_cluster asks it its nodes)
-export([call/2]).
%% gen_server callbacks
-export([init/1, handle_continue/2, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2, code_change/3]).

-export_type([tiers/0, mfa_spec/0, opts/0, report_opts/0, node_report/0]).

-define(SERVER, ?MODULE).
%% How long a report waits for the sink (ms), and more for the server.
-define(REPORT_WAIT, 2000).
-define(REPORT_MARGIN, 1000).
-define(TIMEOUT, 30000).

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
                  max_request_ms => pos_integer(),
                  full_trace => false | all | term() | [term()],
                  full_trace_max_events => pos_integer(),
                  full_trace_max_nodes => pos_integer(),
                  full_trace_max_identities => pos_integer(),
                  atom() => term()}.          % kprof_guard:limits()
-type report_opts() :: #{format => text | string | term | json, % text
                         sort => kprof_report:sort(),     % requests
                         time => self | inclusive,       % self
                         nodes => [node()],              % those of start/2
                         limit => pos_integer() | infinity, % text: 50
                         names => kprof_names:style()}.   % erlang
%% What one node reports; kprof_report:build/2 merges the nodes' into one.
-type node_report() :: #{atom() => term()}.

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
%% refuses; errors of another node come as `{node, Node, Reason}', a node
%% without kprof's code gives `{error, {kprof_not_loaded, Node}}'. A node
%% that cannot be reached (down) is left out: `{ok, #{dropped => [{Node,
%% noconnection}]}}', the tiers running on the others. See the module doc
%% for the options.
-spec start(tiers(), opts()) ->
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

%% Every node validates before any starts (kprof_tiers_cluster:start/3); this
%% server remembers them for stop, reset and report.
%% Nodes that cannot be reached are left out: `{ok, #{dropped => Down}}'.
-spec start_nodes([node()], tiers(), opts()) ->
          ok | {ok, #{dropped := [{node(), term()}]}} | {error, term()}.
start_nodes(Nodes, Tiers, Opts) ->
    case kprof_tiers_cluster:start(Nodes, Tiers, Opts) of
        {ok, Live, Down} ->
            case {call({set_nodes, Live}), Down} of
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
%% {@link node_stop/1}).
%% A node that cannot be reached: every other node is stopped, then
%% `{error, {unreachable, [{Node, Reason}]}}'.
-spec stop() -> ok | {error, term()}.
stop() ->
    kprof_tiers_cluster:each_node(node_stop, [stop]).

%% @doc Forget what was recorded, on every node; tracing goes on.
-spec reset() -> ok | {error, term()}.
reset() ->
    kprof_tiers_cluster:each_node(node_reset, []).

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
-spec report(report_opts()) -> ok | {ok, kprof_report:report() | binary()} | {error, term()}.
report(Opts) ->
    case kprof_tiers_plan:check_report_opts(Opts) of
        ok -> kprof_tiers_cluster:report_nodes(Opts);
        {error, _} = Error -> Error
    end.

%% @doc Write a flame graph of each full-traced identity (`all') or of one,
%% from this node's sink, with the writers of the flame captures:
%% `{ok, [{Identity, Files}]}'. Options: `output_format' (`folded', `perf',
%% `speedscope', `svg', a list, or `all', the default), `output_directory'
%% (`"."'), `open => speedscope'. Files are named
%% `kprof-full-<hash>-<YYYYMMDD-HHMMSS>.<ext>', `<hash>' 12 hex digits of
%% a hash of the identity (salted per node start; never its text, which may
%% hold a secret); the aggregates stay.
-spec full_trace_flame(term(), map()) ->
          {ok, [{term(), [file:filename()]}]} | {error, term()}.
full_trace_flame(Which, Opts) ->
    kprof_tiers_full:flame(Which, Opts).

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
    case persistent_term:get(?TIERS_PT, undefined) of
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
                    kprof_tiers_trace:untrace_now(Patterns);
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
    case persistent_term:get(?TIERS_PT, undefined) of
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

%%%%%%%%%%%%%%%%
%%% PER NODE %%%
%%%%%%%%%%%%%%%%

%% @doc {@link kprof_tiers_plan:check/2} on this node, without the plan.
-spec node_check(tiers(), opts()) -> ok | {error, term()}.
node_check(Tiers, Opts) ->
    case kprof_tiers_plan:check(Tiers, Opts) of
        {ok, _} -> ok;
        {error, _} = Error -> Error
    end.

%% @doc Start kprof if needed, validate, and start the tiers on this
%% node only.
-spec node_start(tiers(), opts()) -> ok | {error, term()}.
node_start(Tiers, Opts) ->
    case kprof_app:ensure_started() of
        ok ->
            case kprof_tiers_plan:check(Tiers, maps:remove(nodes, Opts)) of
                {ok, Plan} -> call({start, Plan});
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc Stop the tiers on this node; `undo' also forgets them (a start
%% that failed elsewhere). `ok' when this call turned the tracing off, or
%% when it was off already by {@link stop/0} or an abort (the report says
%% which); `{error, {already_stopped, #{reason => kprof_tiers_restarted,
%% undone => #{processes => N, patterns => M}}}}' when this server was
%% killed while the tiers ran and its successor turned off what it left
%% (see the module doc): nothing was left for this call to stop.
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
%% The server asks its sink and waits at most `?REPORT_WAIT' (2000) ms:
%% a sink that does not answer by then, or that died, gives the rows of
%% the server's last poll (once a second while tracing is on) with
%% `incomplete' saying why and as of when (otherwise `false'). A server
%% busy past that bound gives `{error, timeout}'. After an abort, the
%% guard's last abort is `guard_abort' (its message for the report).
-spec node_report() -> {ok, node_report()} | {error, term()}.
node_report() ->
    case call(report, ?REPORT_WAIT + ?REPORT_MARGIN) of
        {ok, R = #{aborted := {_, _, _}}} -> {ok, R#{guard_abort => guard_abort()}};
        Other -> Other
    end.

%% The guard's last abort, asked with a bound (the report's is).
-spec guard_abort() -> map() | undefined.
guard_abort() ->
    try erpc:call(node(), kprof_guard, status, [], ?REPORT_MARGIN) of
        #{aborted := #{} = Abort} -> Abort;
        _ -> undefined
    catch
        _:_ -> undefined
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% GEN_SERVER CALLBACKS %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% @private
%% Exits are trapped so terminate/2 turns the tracing off at a shutdown. A
%% record left in kprof_records says the server before this one was killed
%% while it traced: what it set in the VM comes off here, before anything
%% else can run; the sink's part (tiers_stop, the ring, the last report)
%% comes next, in handle_continue/2.
-spec init([]) -> {ok, #state{}} | {ok, #state{}, {continue, term()}}.
init([]) ->
    process_flag(trap_exit, true),
    case kprof_records:get(?SERVER) of
        #{plan := #plan{}} = Rec ->
            Undone = kprof_tiers_trace:undo_record(Rec),
            {ok, #state{}, {continue, {recover, Rec, Undone}}};
        _ ->
            {ok, #state{}}
    end.

%% @private
-spec handle_continue(term(), #state{}) -> {noreply, #state{}}.
handle_continue({recover, Rec, Undone}, S) ->
    {noreply, recovered(Rec, Undone, S)}.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) ->
          {reply, term(), #state{}} | {noreply, #state{}}.
handle_call({start, Plan}, _From, S) ->
    case S#state.active of
        true ->
            {reply, {error, already_started}, S};
        false ->
            %% A poll of the run before must not reach the sink after
            %% tiers_start (its Clear would empty the new rows), nor the
            %% run's tiers_stop.
            S1 = kprof_tiers_window:drop_poll(await_cleaning(S)),
            case kprof_tiers_trace:start(Plan) of
                {ok, Plan1, Counters, Port} ->
                    {reply, ok, started(Plan1, Counters, Port, S1)};
                {error, _} = Error ->
                    {reply, Error, S1}
            end
    end;
handle_call({stop, How}, From, S = #state{active = true}) ->
    %% Answered once tiers_stop is on its way to the sink (clean_sink/2):
    %% what is written to the sink after, a flame capture's start, comes
    %% after it.
    S1 = stopped(S),
    {noreply, forget(How, clean_sink(S1, From))};
handle_call({stop, How}, _From, S) ->
    Reply = case S of
                #state{restarted = #{} = Undone} ->
                    {error, {already_stopped, #{reason => kprof_tiers_restarted,
                                                undone => Undone}}};
                _ ->
                    ok
            end,
    {reply, Reply, forget(How, stopped(S))};
handle_call(reset, _From, S) ->
    case S#state.plan of
        undefined -> {reply, {error, not_started}, S};
        _ -> {reply, ok, reset_state(await_cleaning(S))}
    end;
handle_call(report, From, S) ->
    case S#state.plan of
        undefined -> {reply, {error, not_started}, S};
        _ -> kprof_tiers_window:report_when_polled(From, S)
    end;
handle_call({set_nodes, Nodes}, _From, S) ->
    {reply, ok, S#state{nodes = Nodes}};
handle_call(nodes, _From, S) ->
    {reply, S#state.nodes, S};
handle_call(info, _From, S) ->
    {reply, kprof_tiers_window:state_info(S), S};
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
    S1 = kprof_tiers_window:start_poll(S#state{timer = undefined}),
    {noreply, S1#state{timer = kprof_tiers_window:poll_timer(S1#state.plan)}};
handle_info({poll_done, Ref, Result}, S = #state{poll = #poll{ref = Ref} = P}) ->
    {noreply, polled(P, Result, S#state{poll = undefined})};
handle_info({'EXIT', Pid, Reason}, S = #state{poll = #poll{pid = Pid} = P})
  when Reason =/= normal ->
    {noreply, polled(P, {timeout, #{}}, S#state{poll = undefined})};
handle_info({cleaned, Ref}, S = #state{cleaning = {Ref, _, _}}) ->
    {noreply, cleaned(S)};
handle_info({'EXIT', Pid, Reason}, S = #state{cleaning = {_, Pid, From}})
  when Reason =/= normal ->
    _ = From =/= undefined andalso gen_server:reply(From, {error, {sink, Reason}}),
    {noreply, cleaned(S)};
handle_info({timeout, TRef, {report_wait, From}}, S = #state{waiting = Waiting}) ->
    case lists:keytake(From, 1, Waiting) of
        {value, {From, _At, TRef}, Rest} ->
            NoAnswer = kprof_tiers_window:no_answer(S),
            gen_server:reply(From, {ok, kprof_tiers_window:state_report(NoAnswer, S)}),
            {noreply, S#state{waiting = Rest}};
        _ ->
            {noreply, S}
    end;
handle_info({kprof_alert, sink_down, Info}, S = #state{active = true}) ->
    %% The VM dropped the tracing to the dead port; the patterns stay.
    {noreply, abort_here(sink_down, Info, S)};
handle_info({kprof_alert, sink_down, Info}, S = #state{sink_lost = false, plan = #plan{}}) ->
    %% Stopped already: what the sink held after the last poll is gone.
    {noreply, sink_lost(maps:get(status, Info, Info), S)};
handle_info({'DOWN', MRef, process, _, Reason}, S = #state{sink_mon = MRef}) ->
    S1 = S#state{sink_mon = undefined},
    case S1#state.active of
        true -> {noreply, abort_here(sink_server_down, #{reason => Reason}, S1)};
        false when S1#state.plan =/= undefined -> {noreply, sink_lost(server_down, S1)};
        false -> {noreply, S1}
    end;
handle_info(_Msg, S) ->
    {noreply, S}.

%% @private
%% A shutdown (exits are trapped) or a crash: tracing off, the sink told,
%% the record cleared. (A kill runs none of this: see init/1.)
-spec terminate(term(), #state{}) -> ok.
terminate(_Reason, S) ->
    case S#state.active of
        true -> kprof_tiers_trace:untrace(S#state.plan, S#state.counters, S#state.sink_lost);
        false -> kprof_records:delete(?SERVER)
    end,
    kprof_tiers_trace:unpublish().

%% @private
-spec code_change(term(), #state{}, term()) -> {ok, #state{}}.
code_change(_OldVsn, S, _Extra) ->
    {ok, S}.

%%%%%%%%%%%%%
%%% SETUP %%%
%%%%%%%%%%%%%

-spec started(#plan{}, counters:counters_ref(), port(), #state{}) -> #state{}.
started(Plan, Counters, Port, S) ->
    _ = kprof_sink:subscribe(),
    demonitor_sink(S),
    MRef = case whereis(kprof_sink) of
               undefined -> undefined;
               Pid -> erlang:monitor(process, Pid)
           end,
    kprof_tiers_trace:arm_guard(Plan, Counters),
    Now = now_ns(),
    Base = kprof_tiers_window:sink_base(),
    S1 = kprof_tiers_window:cancel_timer(S),
    write_record(S1#state{plan = Plan, active = true, since = Now, until = undefined,
                          counters = Counters, base = Base, stats = Base, port = Port,
                          snap = undefined, slices = [], slice_from = Now, full = undefined,
                          polled_at = undefined, polls = 0, last_ts = undefined,
                          quiet = false, timer = kprof_tiers_window:poll_timer(Plan),
                          aborted = false,
                          sink_lost = false, final = false, restarted = false,
                          sink_mon = MRef}).

%% The VM's part of a stop; the sink's is clean_sink/2's.
-spec stopped(#state{}) -> #state{}.
stopped(S = #state{active = true, plan = Plan, counters = C}) ->
    kprof_tiers_trace:untrace_at_once(Plan, C),
    kprof_tiers_trace:unpublish(),
    kprof_tiers_window:cancel_timer(S#state{active = false, until = now_ns(), final = false});
stopped(S) ->
    %% Aborted: the flags and patterns are off already.
    kprof_tiers_trace:unpublish(),
    S.

-spec aborted(term(), term(), integer(), #state{}) -> #state{}.
aborted(Reason, Info, Time, S = #state{active = true, plan = Plan, counters = C}) ->
    %% Again, after the guard is disarmed: abort/2 untraced from its
    %% caller, and the guard may have put patterns back since.
    kprof_tiers_trace:untrace_at_once(Plan, C),
    S1 = S#state{active = false, until = now_ns(), final = false, aborted = {Reason, Info, Time}},
    clean_sink(kprof_tiers_window:cancel_timer(S1), undefined);
aborted(_Reason, _Info, _Time, S) ->
    S.

%% The sink (or its server) died: what it held since the last poll is gone
%% with it, and it is not asked again.
-spec abort_here(term(), term(), #state{}) -> #state{}.
abort_here(Reason, Info, S = #state{counters = C}) ->
    counters:put(C, ?ACTIVE, 0),
    Why = case Info of
              #{status := Status} -> Status;
              #{reason := R} -> R;
              _ -> Reason
          end,
    S1 = aborted(Reason, Info, erlang:system_time(millisecond), mark_lost(Why, S)),
    kprof_tiers_window:reply_waiting(S1).

-spec sink_lost(term(), #state{}) -> #state{}.
sink_lost(Why, S) ->
    kprof_tiers_window:reply_waiting(mark_lost(Why, S)).

%% Rows since the last poll are lost; reports wait for nothing more.
-spec mark_lost(term(), #state{}) -> #state{}.
mark_lost(Why, S = #state{sink_lost = false}) ->
    Lost = #{reason => sink_died, detail => Why, at => erlang:system_time(millisecond),
             polled_at => kprof_tiers_window:sys_ms(S#state.polled_at)},
    kprof_tiers_window:drop_poll(S#state{sink_lost = Lost, final = true});
mark_lost(_Why, S) ->
    S.

-spec reset_state(#state{}) -> #state{}.
reset_state(S0 = #state{counters = C}) ->
    S = kprof_tiers_window:drop_poll(S0),
    _ = S#state.sink_lost =:= false andalso kprof_sink:command(tiers_reset),
    _ = [counters:put(C, I, 0) || C =/= undefined, I <- [?SEEN, ?SAMPLED]],
    Now = now_ns(),
    Until = case S#state.active of
                true -> undefined;
                false -> Now
            end,
    Base = case S#state.sink_lost of
               false -> kprof_tiers_window:sink_base();
               _ -> S#state.stats
           end,
    S1 = S#state{since = Now, until = Until, base = Base, stats = Base, snap = undefined,
                 slices = [], slice_from = Now, full = undefined, polled_at = undefined,
                 final = not S#state.active},
    write_record(kprof_tiers_window:start_poll_if_waiting(S1)).
demonitor_sink(#state{sink_mon = undefined}) -> ok;
demonitor_sink(#state{sink_mon = MRef}) -> erlang:demonitor(MRef, [flush]), ok.

-spec recovered(map(), map(), #state{}) -> #state{}.
recovered(Rec = #{plan := Plan}, Undone, S0) ->
    Now = now_ns(),
    Port = maps:get(port, Rec, undefined),
    Msg = io_lib:format("kprof_tiers restarted (the server was killed while the tiers ran; "
                        "its successor turned off the tracing of ~b processes and ~b trace "
                        "patterns)", [maps:get(processes, Undone), maps:get(patterns, Undone)]),
    Base = maps:get(base, Rec, #{}),
    S = S0#state{plan = Plan, active = false, nodes = maps:get(nodes, Rec, []),
                 since = maps:get(since, Rec, Now), until = Now,
                 counters = maps:get(counters, Rec, undefined), base = Base,
                 stats = maps:get(stats, Rec, Base), port = Port,
                 snap = maps:get(snap, Rec, undefined), slices = maps:get(slices, Rec, []),
                 slice_from = maps:get(slice_from, Rec, Now),
                 full = maps:get(full, Rec, undefined),
                 polled_at = maps:get(polled_at, Rec, undefined),
                 polls = maps:get(polls, Rec, 0), final = false, restarted = Undone,
                 aborted = {kprof_tiers_restarted,
                            #{message => unicode:characters_to_binary(Msg), undone => Undone},
                            erlang:system_time(millisecond)}},
    S1 = case maps:get(phase, Rec, active) of
             stopping ->
                 %% Stopped already (by stop/0 or an abort): only the sink's
                 %% part was left; the run keeps its own end.
                 S#state{aborted = maps:get(aborted, Rec, false),
                         restarted = maps:get(restarted, Rec, false)};
             _ ->
                 logger:warning("kprof: ~ts", [Msg]),
                 S
         end,
    recovered_sink(Port, S1).

-spec recovered_sink(port() | undefined, #state{}) -> #state{}.
recovered_sink(Port, S) ->
    case kprof_sink:port() of
        Port when is_port(Port) ->
            _ = kprof_sink:subscribe(),
            MRef = case whereis(kprof_sink) of
                       undefined -> undefined;
                       Pid -> erlang:monitor(process, Pid)
                   end,
            clean_sink(S#state{sink_mon = MRef}, undefined);
        _ ->
            kprof_records:delete(?SERVER),
            sink_lost(sink_restarted, S)
    end.

%% While tracing is on: everything a successor needs, written before each
%% step that sets something and after each poll.
-spec write_record(#state{}) -> #state{}.
write_record(S = #state{active = Active, cleaning = Cleaning, plan = Plan = #plan{}})
  when Active; Cleaning =/= undefined ->
    Phase = case Active of
                true -> active;
                false -> stopping
            end,
    kprof_records:put(?SERVER, #{phase => Phase, plan => Plan, port => S#state.port,
                                 aborted => S#state.aborted, restarted => S#state.restarted,
                                 full_modules => [M || {{M, _, _}, _} <- Plan#plan.full_patterns],
                                 since => S#state.since, base => S#state.base,
                                 counters => S#state.counters, nodes => S#state.nodes,
                                 snap => S#state.snap, slices => S#state.slices,
                                 slice_from => S#state.slice_from, stats => S#state.stats,
                                 full => S#state.full, polled_at => S#state.polled_at,
                                 polls => S#state.polls}),
    S;
write_record(S) ->
    S.

%%% Stopping: the sink's part

%% The rest of a stop, an abort or a restart, in a process of its own
%% (reports are answered meanwhile, from the last poll): the guard disarmed
%% (it may be finishing an abort of its own), flags and patterns off again
%% (it may have put some back before), the tracer NIF detached (the sink
%% reads what the ring holds before its next command),
%% then tiers_stop written, in order with every other command, without
%% waiting for its answer. The stop's caller (From) is answered once it is
%% written; then the server hears `{cleaned, Ref}', forgets the record and
%% takes the last poll. A sink that died (or a new one) is not written to.
-spec clean_sink(#state{}, undefined | gen_server:from()) -> #state{}.
clean_sink(S = #state{port = Port, plan = Plan = #plan{}},
           From) ->
    Self = self(),
    Ref = make_ref(),
    Lost = S#state.sink_lost =/= false,
    Pid = spawn_link(fun() ->
                             kprof_tiers_trace:clean(Plan, Port, Lost),
                             Self ! {cleaned, Ref},
                             _ = From =/= undefined andalso gen_server:reply(From, ok),
                             ok
                     end),
    write_record(S#state{cleaning = {Ref, Pid, From}}).

-spec cleaned(#state{}) -> #state{}.
cleaned(S) ->
    kprof_records:delete(?SERVER),
    kprof_tiers_window:next_poll(S#state{cleaning = undefined}).

%% A start or reset waits for the sink's part of the stop before it.
-spec await_cleaning(#state{}) -> #state{}.
await_cleaning(S = #state{cleaning = undefined}) ->
    S;
await_cleaning(S = #state{cleaning = {Ref, Pid, _}}) ->
    receive
        {cleaned, Ref} -> ok
    after ?TIMEOUT ->
            unlink(Pid),
            exit(Pid, kill)
    end,
    kprof_records:delete(?SERVER),
    S#state{cleaning = undefined}.

%% stop(undo): a start that failed elsewhere is forgotten.
-spec forget(stop | undo, #state{}) -> #state{}.
forget(stop, S) ->
    S;
forget(undo, S) ->
    S1 = kprof_tiers_window:reply_waiting(kprof_tiers_window:drop_poll(S)),
    S1#state{plan = undefined, slices = [], snap = undefined}.

-spec polled(#poll{}, term(), #state{}) -> #state{}.
polled(P, {ok, Acc}, S) ->
    S1 = kprof_tiers_window:took(P, Acc, S),
    S2 = case P#poll.final of
             true -> S1#state{final = true};
             false -> S1
         end,
    kprof_tiers_window:answer_waiting(P, write_record(S2));
polled(P, {timeout, Acc}, S) ->
    %% The reports waiting get their answer at their deadline.
    write_record(kprof_tiers_window:took(P, Acc, S));
polled(P, {lost, Why, Acc}, S = #state{active = Active}) ->
    S1 = kprof_tiers_window:took(P, Acc, S),
    case Active of
        true -> abort_here(sink_down, #{reason => Why}, S1);
        false -> sink_lost(Why, S1)
    end.

-spec now_ns() -> integer().
now_ns() ->
    erlang:monotonic_time(nanosecond).

-spec call(term()) -> term().
call(Request) ->
    call(Request, ?TIMEOUT).

%% @private A call to this node's server: `{error, not_running}' when there is none.
-spec call(term(), timeout()) -> term().
call(Request, Timeout) ->
    try
        gen_server:call(?SERVER, Request, Timeout)
    catch
        exit:{noproc, _} -> {error, not_running};
        exit:{timeout, _} -> {error, timeout};
        exit:{Reason, _} -> {error, {not_running, Reason}}
    end.

