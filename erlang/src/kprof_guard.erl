%%% @doc The safety net under every kind of kprof tracing.
%%%
%%% A tracing mode (tiers, a flame capture, a calls session) arms the guard with the trace
%%% patterns it set, a function that turns its tracing off, its limits and
%%% its owner (the server that set its tracing up).
%%%
%%% The guard alone says which modes may trace together (flame captures do;
%%% the tiers and a calls session run alone): a mode claims the tracing
%%% before it sets anything ({@link claim/1}; a calls session with
%%% {@link arm_alone/2}) and is told `{error, {busy, Mode}}' while another
%%% holds it. (The sink refuses `tiers_start' during a capture and
%%% `flame_start' during the tiers too, in the order of its commands: after
%%% an abort, the guard has let the mode go while the sink may still hold
%%% its capture until the files are written.)
%%%
%%% While anything is armed, the guard watches, every 50 ms
%%% ({@link kprof_guard_watch:tick_ms/0}), without ever waiting for the
%%% sink, its port or any other server:
%%%
%%% <ul>
%%% <li>the age of trace messages when the sink reads them (the sink measures
%%%     it against the VM's clock, which the guard sends it once a second while
%%%     the port queue is short): `max_lag_ms';</li>
%%% <li>the sink's reader, from the VM side: the tracer NIF's ring counters
%%%     (`kprof_tracer:ring_info/0', shared memory): events waiting in the
%%%     ring while its tail has not moved for `max_stall_ms' (less the
%%%     node's own delay meanwhile, as for the port below)
%%%     mean the sink stopped reading (frozen, or starved); any event the
%%%     ring had to drop (full) is an overload at once;</li>
%%% <li>the port's queue on the VM side, `erlang:port_info(Port, queue_size)',
%%%     asked by a helper process (it waits behind the port's backlog): past
%%%     `max_queue_bytes' (the VM's port queue degrades
%%%     quadratically when large), or no answer within `max_lag_ms' (the
%%%     trace messages before it waited as long; judged when they go
%%%     through the port: through the tracer NIF's ring none waits there,
%%%     and the ring's bounds above watch the sink). The node's own delay is
%%%     not the port's: how late the guard's ticks came meanwhile (its CPUs
%%%     taken by other programs, its schedulers waiting for a trace pattern
%%%     set on every module) is taken off the wait;</li>
%%% <li>the node's memory, `erlang:memory(total)': `max_memory_bytes' (`default':
%%%     the total at arming plus 1 GiB). Its alert says where the memory is:
%%%     `memory' and `largest' ({@link kprof_guard_memory});</li>
%%% <li>recon_trace-style limits: `max_events', `rate => {Max, PerMs}',
%%%     `max_seconds'. The sink enforces `max_events' and `rate' itself, on
%%%     every event it reads (the `{limits, ...}' command, doc/internals-protocol.md):
%%%     the event past the bound trips its `limit' alert, and from that event
%%%     on nothing more reaches the tiers or a capture, so the report holds
%%%     exactly the events up to the bound, however many the VM still sends
%%%     before tracing is off. `max_seconds' is the guard's own;</li>
%%% <li>the sink itself: if it dies, or its owner does, everything is turned off;</li>
%%% <li>each mode's owner: if the server that set a mode's tracing up dies
%%%     (killed, crashed), that mode's tracing is turned off (`owner_down');</li>
%%% <li>code reloads, which silently drop trace patterns: they are put back
%%%     and counted (`reapplied'). A pattern on every function of a module
%%%     (`{module, ...}' in {@link arm_spec()}) is checked on one function
%%%     of it, its sentinel: a reload replaces the whole module, so one
%%%     function that lost its pattern means they all did.</li>
%%% </ul>
%%%
%%% When a bound is crossed, every armed mode is aborted at once (its own
%%% abort function, then, as a net, every pattern it armed and every trace
%%% flag whose tracer is kprof's, the sink's port or the tracer NIF: on OTP
%%% 27 and later the mode's trace session is destroyed, {@link
%%% kprof_trace_session}), a
%%% `logger' warning says what tripped with the measured figure and the
%%% bound, subscribers get `{kprof_alert, Kind, Info}' (`Kind' is
%%% `overload', `limit', `sink_down' or `owner_down'), and {@link status/0}
%%% shows it. Restarting is one call to the mode's start function. A sink
%%% that stopped reading is pinged after the abort; if it does not answer
%%% within `?WATCHDOG_MS' ms it is killed and restarted.
%%%
%%% An abort takes patterns off, which waits for the VM and for a pattern
%%% another process is setting on every module (a capture starting): seconds
%%% on a loaded machine, while every other call waits behind it. So every
%%% call to the guard is said in a `logger' error after 5 s, with where the
%%% guard is ({@link kprof_late_call}), and gives up after 60 s with `{error,
%%% timeout}' (what was asked still runs when the guard gets to it); `{error,
%%% not_running}' when it is not running.
%%%
%%% The guard writes what it watches to {@link kprof_records}: killed, it is
%%% restarted by kprof's supervisor and goes on guarding the same modes with
%%% the same limits, subscribers and start times.
%%%
%%% This server reads the figures and acts; what a tick decides from them
%%% (which bound was crossed, with the alert that says so, and what is due
%%% next), and the arithmetic of the limits, are {@link kprof_guard_watch}'s,
%%% functions of their arguments.
%%%
%%% == Limits ==
%%% The options every mode takes (tiers, flame captures, calls), from the
%%% option table (include/ks_options.h); {@link default_limits/0} are the
%%% defaults:
%%% <!-- BEGIN option-docs user guard: generated by `make option-docs' -->
%%% <ul>
%%% <li>`max_lag_ms' (default `1000'; integer >= 1 or infinity): abort when the sink lags this far behind</li>
%%% <li>`max_stall_ms' (default `500'; integer >= 1 or infinity): abort when the sink stops reading this long</li>
%%% <li>`max_queue_bytes' (default `4194304'; integer >= 1 or infinity): abort past this many bytes queued to the sink</li>
%%% <li>`max_memory_bytes' (default `default'; term): abort past this much node memory, erlang:memory(total): bytes | infinity | default (at arming + 1 GiB)</li>
%%% <li>`max_events' (default `infinity'; integer >= 1 or infinity): abort past this many events</li>
%%% <li>`rate' (default `infinity'; term): {Max, PerMs} | infinity: abort past this event rate</li>
%%% <li>`max_seconds' (default `infinity'; integer >= 1 or infinity): abort after this long</li>
%%% </ul>
%%% <!-- END option-docs user guard -->
-module(kprof_guard).
-behaviour(gen_server).

%% PUBLIC
-export([start_link/0, claim/1, arm/2, arm_alone/2, disarm/1, abort/2, status/0,
         subscribe/0, unsubscribe/0, validate_limits/1, default_limits/0,
         other_tracers/0, events_baseline/1, limits_off/0, watch_patterns/2,
         limit_keys/0, kprof_tracers/0]).
%% gen_server
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-export_type([limits/0, arm_spec/0, abort_kind/0, pattern/0]).

%% After an abort because the sink stopped reading: how long it has to answer
%% a ping before it is killed and restarted.
-define(WATCHDOG_MS, 5000).
%% The sink's limits off: {limits, 0, 0, 0}.
-define(NO_SINK_LIMITS, {0, 0, 0}).
%% Every call to the guard: it may be taking patterns off, which waits for
%% the VM (seconds on a loaded machine). Said after 5 s, given up after 60 s
%% (kprof_late_call); the request still runs when the guard gets to it.
-define(CALL(Request), kprof_late_call:call(?MODULE, Request, 5000, 60000)).

%% A call the guard did not answer in 60 s, or no guard (kprof_late_call).
-type call_error() :: {error, timeout | not_running | {not_running, term()}}.
-type abort_kind() :: overload | limit | sink_down | owner_down | stopped | manual.
-type limits() :: #{max_lag_ms => pos_integer() | infinity,
                    max_stall_ms => pos_integer() | infinity,
                    max_queue_bytes => pos_integer() | infinity,
                    max_memory_bytes => pos_integer() | infinity | default,
                    max_events => pos_integer() | infinity,
                    rate => {pos_integer(), pos_integer()} | infinity,
                    max_seconds => pos_integer() | infinity}.
%% `{MFA, MatchSpec, Flags}': one `erlang:trace_pattern/3' call (in the
%% mode's trace session, `meta' for its meta tracer), checked on `MFA' (its
%% module's first function for a wildcard). `{module, M,
%% MatchSpec, Flags, Sentinel}': the pattern on every function of `M', its
%% BIFs aside, as {@link kprof_guard_reload:module_pattern/4} sets it and returns it; checked
%% on `Sentinel' alone (`undefined': never checked), and put back module-wide
%% with a new sentinel should the old function be gone.
-type pattern() :: {{module(), atom(), arity() | '_'}, term(), list()}
                 | {module, module(), term(), list(), mfa() | undefined}.
%% `session': where the mode traces ({@link kprof_trace_session}; without
%% it, the legacy API); its patterns are put back and taken off there, and
%% an abort destroys it.
-type arm_spec() :: #{abort := fun((abort_kind(), map()) -> any()),
                      session => kprof_trace_session:session(),
                      patterns => [pattern()],
                      limits => limits(),
                      reapplied => fun((mfa() | {module(), '_', '_'}) -> any()),
                      events0 => non_neg_integer(),
                      owner => pid()}.

-type sink_limits() :: kprof_guard_watch:sink_limits().
-record(armed, {abort, patterns = [], reapplied, since,
                session :: kprof_trace_session:session() | undefined,
                owner :: pid() | undefined,
                owner_mon :: reference() | undefined}).
-record(state, {armed = #{} :: #{atom() => #armed{}},
                %% Modes that claimed the tracing and have not armed yet:
                %% the claiming process, monitored.
                claims = #{} :: #{term() => {pid(), reference()}},
                %% An abort that came while these modes had claimed and not
                %% armed: each is aborted as it arms (its start may have
                %% set flags since its claim).
                claim_aborts = #{} :: #{term() => {abort_kind(), kprof_alert:info()}},
                limits = #{} :: map(),
                subs = #{} :: #{pid() => reference()},
                sink_mon :: reference() | undefined,
                mem_base = 0 :: non_neg_integer(),
                %% {MaxEvents, RateMax, RatePerMs} last sent to the sink
                %% (0: no bound); after a trip the sink keeps it until
                %% the next mode's start sets it again.
                sink_limits = ?NO_SINK_LIMITS :: sink_limits(),
                %% The sink's limit alert that came after a baseline
                %% (events_baseline/1) and before the mode armed: the mode
                %% is aborted as soon as it arms.
                early_limit :: kprof_alert:info() | undefined,
                aborted :: map() | undefined,
                other_tracers = [] :: [{pid(), term()}],
                other_sessions = [] :: [{pid(), term()}],
                reapplied = 0 :: non_neg_integer(),
                %% What the ticks keep between them (kprof_guard_watch).
                watch = kprof_guard_watch:new(0) :: kprof_guard_watch:watch(),
                %% The sink's port as last seen while watching: a sink
                %% killed is gone from kprof_sink before the abort runs,
                %% and its port is still the tracer of what it traced.
                port :: port() | undefined}).

%%====================================================================
%% PUBLIC
%%====================================================================

%% @doc Starts the guard (kprof's supervisor does).
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc The limits used where a mode does not give its own: the defaults of
%% the option table's guard rows (include/ks_options.h, {@link kprof_opts}).
-spec default_limits() -> limits().
default_limits() ->
    kprof_opts:defaults(guard).

%% @doc The option keys that are the guard's limits (those of
%% {@link default_limits/0}): a mode's options with these keys are given to
%% {@link validate_limits/1}.
-spec limit_keys() -> [atom()].
limit_keys() ->
    maps:keys(default_limits()).

%% @doc Checks limit options (any other keys are left to the caller).
%% Returns the limits merged over the defaults, or the first bad one.
-spec validate_limits(map()) -> {ok, limits()} | {error, {bad_option, atom(), term()}}.
validate_limits(Opts) when is_map(Opts) ->
    kprof_opts:check(guard, maps:with(limit_keys(), Opts)).

%% @doc Claims the tracing for mode `Name' (`tiers', a capture's
%% ``{kprof_flame, Id}'') before the mode sets anything: `ok', or `{error,
%% {busy, Mode}}' (`tiers', `flame' or `calls': the first, in term order,
%% of the modes armed or claimed that `Name' may not run beside) and nothing
%% changes. Flame captures run together; the tiers, and a calls session,
%% run alone. The claim becomes the mode's when it arms ({@link arm/2});
%% until then it goes with {@link disarm/1} (the start failed) or with the
%% calling process. An abort while the mode has claimed and not armed is
%% the mode's: it is aborted as it arms. `ok' when the guard is not running
%% (nothing is armed).
-spec claim(term()) -> ok | {error, {busy, atom()} | {guard, term()}}.
claim(Name) ->
    case ?CALL({claim, Name, self()}) of
        {error, not_running} -> ok;
        {error, {not_running, Reason}} -> {error, {guard, Reason}};
        {error, timeout} -> {error, {guard, timeout}};
        Answer -> Answer
    end.

%% @doc Arms the guard for a tracing mode. `Name' is the mode (tiers, a
%% capture's name); arming it again replaces it. The strictest limit of all
%% armed modes applies.
%%
%% `events0' says the mode called {@link events_baseline/1} before it set
%% its trace flags: the sink's `max_events' and `rate' were set then and
%% count from there. Without it, arming sets them, and they count from the
%% sink's reading of that command, after the flags. With modes armed at
%% different times, a later mode whose limits are stricter sets the sink's
%% again, and the count starts again from its start. `reapplied' is called
%% with each pattern of the mode put back after a code reload: its `MFA',
%% or ``{M, '_', '_'}'' for a `{module, M, ...}' pattern.
%%
%% The patterns (see {@link pattern()}) are checked once a second. A
%% mode's `{module, M, ...}' pattern put back after a reload is followed
%% by its other patterns on functions of `M' (they win over it, as when
%% the mode set them after it). When a mode is aborted its patterns are
%% cleared; a `{module, ...}' pattern is left to a ``{{'_', '_', '_'}, _,
%% Flags}'' pattern of the same flags if the mode has one (one call clears
%% them all).
-spec arm(atom() | term(), arm_spec()) -> ok | {error, term()}.
arm(Name, Spec = #{abort := Abort}) when is_function(Abort, 2) ->
    ?CALL({arm, Name, Spec}).

%% @doc {@link claim/1} and {@link arm/2} in one call, for a mode that
%% arms before it sets anything: `{error, {busy, Mode}}' as `claim/1' says
%% it, and nothing changes then. A calls session (`Name' `calls'), which
%% sets flags on new processes too, is also refused while a tracer has
%% flags on them (`erlang:trace_info(new, tracer)'): `{busy, kprof}' when
%% it is kprof's, `{busy, {tracer, Tracer}}' when it is another's (a tool
%% of the user's).
-spec arm_alone(atom() | term(), arm_spec()) ->
          ok | {error, {busy, atom() | {tracer, term()}}}.
arm_alone(Name, Spec = #{abort := Abort}) when is_function(Abort, 2) ->
    ?CALL({arm_alone, Name, Spec}).

%% @doc The mode stopped by itself, or did not start after its
%% {@link claim/1}: stop watching for it, and its claim goes.
-spec disarm(term()) -> ok | call_error().
disarm(Name) ->
    ?CALL({disarm, Name}).

%% @doc Aborts every armed mode now, as if a bound had been crossed; `ok'
%% once everything is off (seconds on a loaded machine: said after 5 s,
%% `{error, timeout}' after 60 s, as every call to the guard).
-spec abort(abort_kind(), map()) -> ok | call_error().
abort(Kind, Info) when is_atom(Kind), is_map(Info) ->
    ?CALL({abort, Kind, Info}).

%% @doc What is armed, the limits in force, and the last abort (if any):
%% `#{armed => [Name], limits => Limits, aborted => undefined | Abort,
%% reapplied => N}', `Abort = #{kind, info, at, took_us, message}'.
-spec status() -> map() | call_error().
status() ->
    ?CALL(status).

%% @doc The caller gets `{kprof_alert, Kind, Info}' for every abort.
-spec subscribe() -> ok | call_error().
subscribe() ->
    ?CALL({subscribe, self()}).

%% @doc Stops the alerts of {@link subscribe/0}.
-spec unsubscribe() -> ok | call_error().
unsubscribe() ->
    ?CALL({unsubscribe, self()}).

%% @doc Processes traced by a tracer that is not kprof's (recon_trace, dbg
%% before OTP 27, a tool of your own) in the session kprof traces in (the
%% only one before OTP 27): a process has one tracer there, so kprof cannot
%% see their calls, and `erlang:trace(all, ...)' passes them over silently.
%% kprof's own tracers (see {@link kprof_sessions:ours/1}) are never listed.
%% From OTP 27 kprof traces in sessions of its own, where no other tracer
%% is: `[]'; processes that other trace sessions trace (the legacy API's,
%% dbg's, ...) are {@link kprof_sessions:others/0}.
-spec other_tracers() -> [{pid(), Tracer :: term()}].
other_tracers() ->
    case kprof_trace_session:supported() of
        true ->
            [];
        false ->
            [{P, T} || P <- processes(),
                       {tracer, T} <- [try erlang:trace_info(P, tracer) catch _:_ -> undefined end],
                       T =/= [], not kprof_sessions:ours(T)]
    end.

%% @doc Sets the sink's `max_events' and `rate' for a mode about to set its
%% trace flags (the strictest of `Limits' and those of the modes armed
%% already), and waits for the sink to read the command: the sink counts
%% every event after it, and none before. Returns the sink's count of trace
%% events at that point, for {@link arm/2} as `events0'; `undefined' when
%% nothing was sent (`Limits' count no events and no limits are set, or the
%% armed modes' limits stand as they are), the guard is not running, or the
%% sink does not answer within the `call_timeout' (5000 ms by default, as
%% every command). A mode that starts without the answer may set its flags
%% before the sink reads the command, and those first events are then not
%% counted against `max_events'. The sink counts what comes through
%% the port and what the tracer NIF writes to its ring alike, and reads the
%% ring before every command. A limit the sink trips after the command and
%% before the mode arms aborts the mode as soon as it arms.
-spec events_baseline(map()) -> non_neg_integer() | undefined.
events_baseline(Limits) when is_map(Limits) ->
    try ?CALL({sink_limits, Limits}) of
        {send, {Max, RateMax, PerMs}} ->
            try kprof_sink:command({limits, Max, RateMax, PerMs}) of
                {ok, N} when is_integer(N) -> N;
                _ -> undefined
            catch _:_ -> undefined
            end;
        _ ->
            undefined
    catch _:_ -> undefined
    end.

%% @doc Before a start's own events that no mode's limits are for (the
%% tiers' calibration, some 42,000): with no mode armed, the sink's
%% `max_events' and `rate' come off, the command read by the sink before
%% this returns. A limit left by a start that never armed would otherwise
%% count them, trip on them, and abort the next mode as it arms. With a
%% mode armed, its limits stand.
-spec limits_off() -> ok.
limits_off() ->
    _ = try ?CALL(limits_off) =:= send
            andalso kprof_sink:command({limits, 0, 0, 0})
        catch _:_ -> ok
        end,
    ok.

%% @doc Replaces the patterns the guard puts back after a code reload for
%% mode `Name' (a mode that removes a pattern of its own while it runs,
%% e.g. a capture's trigger, says so first, or the guard would put it back).
-spec watch_patterns(term(), [pattern()]) -> ok | call_error().
watch_patterns(Name, Patterns) when is_list(Patterns) ->
    ?CALL({watch_patterns, Name, Patterns}).

%%====================================================================
%% gen_server
%%====================================================================

%% @private
%% A guard killed while modes were armed left them in kprof_records: this
%% one goes on watching them (their owners monitored again; a mode whose
%% owner died meanwhile is turned off at once).
init([]) ->
    process_flag(trap_exit, true),
    %% The safety net runs before the traced work it guards (its tick is a
    %% few reads of counters): busy traced processes must not delay it.
    process_flag(priority, high),
    case kprof_records:get(?MODULE) of
        #{armed := Armed} = R when map_size(Armed) > 0 ->
            {ok, restore(R)};
        #{subs := Subs} = R ->
            {ok, saved(#state{subs = maps:from_list([{P, monitor(process, P)} || P <- Subs]),
                              claims = claims(R)})};
        _ ->
            {ok, #state{}}
    end.

%% @private
handle_call({claim, Name, Pid}, _From, S) ->
    case busy(Name, Pid, S) of
        free -> {reply, ok, saved(claimed(Name, Pid, S))};
        Busy -> {reply, {error, Busy}, S}
    end;
handle_call({arm, Name, Spec}, _From, S) ->
    {reply, ok, saved(arm_mode(Name, Spec, S))};
handle_call({arm_alone, Name, Spec}, _From, S) ->
    case busy(Name, maps:get(owner, Spec, undefined), S) of
        free -> arm_alone(Name, Spec, new_tracer(Name), S);
        Busy -> {reply, {error, Busy}, S}
    end;
handle_call({sink_limits, Limits}, _From, S) ->
    Fresh = map_size(S#state.armed) =:= 0,
    Want = kprof_guard_watch:sink_bounds(kprof_guard_watch:strictest(S#state.limits, Limits,
                                                                     Fresh)),
    case kprof_guard_watch:sink_limits_due(Fresh, Want, S#state.sink_limits) of
        true ->
            %% Subscribed before the caller sends the limits (the fence is
            %% answered first): a trip before the mode arms is seen.
            _ = Fresh andalso (try kprof_sink:subscribe() catch _:_ -> ok end),
            {reply, {send, Want}, S#state{sink_limits = Want, early_limit = undefined}};
        false ->
            {reply, keep, S}
    end;
handle_call(limits_off, _From, S) when map_size(S#state.armed) =:= 0,
                                       S#state.sink_limits =/= ?NO_SINK_LIMITS ->
    {reply, send, S#state{sink_limits = ?NO_SINK_LIMITS, early_limit = undefined}};
handle_call(limits_off, _From, S) ->
    {reply, keep, S};
handle_call({watch_patterns, Name, Patterns}, _From, S = #state{armed = Armed}) ->
    case Armed of
        #{Name := A} ->
            {reply, ok, saved(S#state{armed = Armed#{Name := A#armed{patterns = Patterns}}})};
        _ ->
            {reply, ok, S}
    end;
handle_call({disarm, Name}, _From, S0 = #state{armed = Armed}) ->
    _ = case Armed of
            #{Name := #armed{owner_mon = Mon}} when is_reference(Mon) -> demonitor(Mon, [flush]);
            _ -> ok
        end,
    S = unclaimed(Name, S0),
    {reply, ok, saved(maybe_unwatch(S#state{armed = maps:remove(Name, Armed)}, clear))};
handle_call({abort, Kind, Info}, _From, S) ->
    T0 = erlang:monotonic_time(microsecond),
    {reply, ok, do_abort(Kind, kprof_alert:from_map(Kind, Info), T0, S)};
handle_call(status, _From, S) ->
    {reply, status_map(S), S};
handle_call({subscribe, Pid}, _From, S = #state{subs = Subs}) ->
    case maps:is_key(Pid, Subs) of
        true -> {reply, ok, S};
        false -> {reply, ok, saved(S#state{subs = Subs#{Pid => monitor(process, Pid)}})}
    end;
handle_call({unsubscribe, Pid}, _From, S = #state{subs = Subs}) ->
    case maps:take(Pid, Subs) of
        {Ref, Rest} -> demonitor(Ref, [flush]), {reply, ok, saved(S#state{subs = Rest})};
        error -> {reply, ok, S}
    end;
handle_call(_Other, _From, S) ->
    {reply, {error, unknown_call}, S}.

%% @private
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
handle_info(tick, S) when map_size(S#state.armed) =:= 0 ->
    {noreply, S};
handle_info(tick, S0) ->
    erlang:send_after(kprof_guard_watch:tick_ms(), self(), tick),
    {noreply, check(S0)};
handle_info({sink_reply, _Cmd, _Reply}, S) ->
    {noreply, S};
handle_info({port_queue, Ref, Answered, Queue}, S = #state{watch = W}) ->
    %% The next tick judges the figures.
    {noreply, S#state{watch = kprof_guard_watch:probed(Ref, Answered, Queue, W)}};
handle_info({kprof_alert, overload, Info}, S) ->
    T0 = erlang:monotonic_time(microsecond),
    %% The sink's alert is in kprof's shape already (kprof_alert).
    {noreply, do_abort(overload, Info, T0, S)};
handle_info({kprof_alert, sink_down, Info}, S) ->
    T0 = erlang:monotonic_time(microsecond),
    {noreply, do_abort(sink_down, Info, T0, S)};
%% The sink's max_events or rate tripped (only limits the guard set do).
%% The sink keeps limiting what the VM still sends until the next start.
handle_info({kprof_alert, limit, Info}, S) when S#state.sink_limits =/= ?NO_SINK_LIMITS,
                                                 map_size(S#state.armed) =:= 0 ->
    %% Tripped between a baseline and the arming of its mode.
    {noreply, S#state{early_limit = Info}};
handle_info({kprof_alert, limit, Info}, S) when S#state.sink_limits =/= ?NO_SINK_LIMITS ->
    T0 = erlang:monotonic_time(microsecond),
    {noreply, do_abort(limit, Info, T0, S, keep)};
handle_info({kprof_alert, _Kind, _Info}, S) ->
    {noreply, S};
%% A mode that armed after an abort that came while it had claimed the
%% tracing (see arm_mode/3): alone, the abort as it would have been; beside
%% modes armed since, it alone is turned off.
handle_info({claim_aborted, Name, Kind, Info}, S = #state{armed = Armed}) ->
    T0 = erlang:monotonic_time(microsecond),
    case Armed of
        #{Name := _} when map_size(Armed) =:= 1 ->
            {noreply, do_abort(Kind, Info, T0, S)};
        #{Name := A} ->
            _ = turn_off(Name, A, Kind, Info, S#state.port),
            _ = is_reference(A#armed.owner_mon) andalso demonitor(A#armed.owner_mon, [flush]),
            logger:warning("kprof: ~p aborted as it armed: ~ts", [Name, maps:get(message, Info)]),
            {noreply, saved(S#state{armed = maps:remove(Name, Armed)})};
        #{} ->
            {noreply, S}
    end;
handle_info({'DOWN', Ref, process, _Pid, Reason}, S = #state{sink_mon = Ref}) ->
    T0 = erlang:monotonic_time(microsecond),
    Info = kprof_alert:new(sink_down, sink_server, Reason, undefined,
                           #{reason => owner_down, detail => Reason}),
    S1 = do_abort(sink_down, Info, T0, S#state{sink_mon = undefined}),
    {noreply, S1};
handle_info({'DOWN', Ref, process, Pid, Reason}, S = #state{subs = Subs, armed = Armed}) ->
    case maps:get(Pid, Subs, undefined) of
        Ref ->
            {noreply, saved(S#state{subs = maps:remove(Pid, Subs)})};
        _ ->
            case [N || {N, #armed{owner_mon = M}} <- maps:to_list(Armed), M =:= Ref] of
                [] -> {noreply, claimer_down(Ref, S)};
                Names -> {noreply, owner_down(Names, Pid, Reason, S)}
            end
    end;
handle_info(_Msg, S) ->
    {noreply, S}.

%% @private
%% The application is stopping: nothing of kprof's stays on the node.
terminate(_Reason, S) ->
    _ = [turn_off(Name, A, stopped, #{}, S#state.port)
         || {Name, A} <- maps:to_list(S#state.armed)],
    kprof_trace_session:destroy_all(),
    kprof_records:delete(?MODULE),
    ok.

%%====================================================================
%% PRIVATE: arming
%%====================================================================

%% A mode armed (again: its old owner forgotten): the first one starts the
%% watch; the limits in force become the strictest of every mode's, and the
%% sink is sent its share when no baseline was taken (events_baseline/1).
arm_mode(Name, Spec, S0) ->
    Limits = maps:get(limits, Spec, default_limits()),
    Owner = maps:get(owner, Spec, undefined),
    _ = case S0#state.armed of
            #{Name := #armed{owner_mon = OldMon}} when is_reference(OldMon) ->
                demonitor(OldMon, [flush]);
            _ -> ok
        end,
    A = #armed{abort = maps:get(abort, Spec),
               session = maps:get(session, Spec, undefined),
               patterns = maps:get(patterns, Spec, []),
               reapplied = maps:get(reapplied, Spec, undefined),
               since = erlang:monotonic_time(millisecond),
               owner = Owner,
               owner_mon = case is_pid(Owner) of
                               true -> monitor(process, Owner);
                               false -> undefined
                           end},
    First = map_size(S0#state.armed) =:= 0,
    S1 = case First of
             true -> start_watch((unclaimed(Name, S0))#state{aborted = undefined});
             false -> unclaimed(Name, S0)
         end,
    Others = other_tracers(),
    warn_other_tracers(Others),
    Sessions = kprof_sessions:others(),
    warn_other_sessions(Sessions),
    S2 = S1#state{armed = maps:put(Name, A, S1#state.armed),
                  limits = kprof_guard_watch:strictest(S1#state.limits, Limits, First),
                  other_tracers = Others, other_sessions = Sessions},
    Baseline = is_integer(maps:get(events0, Spec, undefined)),
    S3 = arm_sink_limits(First andalso not Baseline, S2#state.limits, S2),
    send_overload_bound(S3),
    _ = case S0#state.claim_aborts of
            #{Name := {Kind, Info}} -> self() ! {claim_aborted, Name, Kind, Info};
            _ -> ok
        end,
    early_limit(First andalso Baseline, S3).

%% The limit that tripped before the first mode armed, after its baseline,
%% aborts it once the arming is answered (the abort may call the mode, which
%% is waiting for that answer); any other start sent limits anew.
early_limit(true, S = #state{early_limit = Info}) when is_map(Info) ->
    self() ! {kprof_alert, limit, Info},
    S#state{early_limit = undefined};
early_limit(_, S) ->
    S#state{early_limit = undefined}.

%% The one rule of kprof's modes: flame captures run together, the tiers
%% and a calls session alone. `free', or `{busy, Mode}' of the first (in
%% term order) mode armed or claimed that Name may not run beside; its own
%% claim or arming (the same name by the same process) is none.
busy(Name, Pid, #state{armed = Armed, claims = Claims}) ->
    Held = [{N, O} || {N, #armed{owner = O}} <- maps:to_list(Armed)]
        ++ [{N, P} || {N, {P, _Mon}} <- maps:to_list(Claims)],
    Flame = mode_name(Name) =:= flame,
    case lists:sort([N || {N, P} <- Held, {N, P} =/= {Name, Pid},
                          not (Flame andalso mode_name(N) =:= flame)]) of
        [] -> free;
        [First | _] -> {busy, mode_name(First)}
    end.

%% A calls session sets flags on new processes too: before OTP 27, not while
%% a tracer has flags on them already (`{busy, kprof}': a mode of kprof's
%% left them; else a tool of the user's). From OTP 27 the session is kprof's
%% own: another session's flags on new processes do not keep it out.
new_tracer(calls) ->
    case not kprof_trace_session:supported() andalso erlang:trace_info(new, tracer) of
        {tracer, T} when T =/= [] -> {busy, case kprof_sessions:ours(T) of
                                              true -> kprof;
                                              false -> {tracer, T}
                                          end};
        _ -> free
    end;
new_tracer(_Name) ->
    free.

arm_alone(Name, Spec, free, S) ->
    {reply, ok, saved(arm_mode(Name, Spec, S))};
arm_alone(_Name, _Spec, Busy, S) ->
    {reply, {error, Busy}, S}.

%% A claim made again (by the same start) keeps an abort that came since.
claimed(Name, Pid, S0) ->
    S = #state{claims = Claims} = unclaimed(Name, S0),
    S#state{claims = Claims#{Name => {Pid, monitor(process, Pid)}},
            claim_aborts = S0#state.claim_aborts}.

unclaimed(Name, S0 = #state{claims = Claims}) ->
    S = S0#state{claim_aborts = maps:remove(Name, S0#state.claim_aborts)},
    case maps:take(Name, Claims) of
        {{_Pid, Mon}, Rest} -> demonitor(Mon, [flush]), S#state{claims = Rest};
        error -> S
    end.

%% A process that claimed a mode died before it armed: its claim goes.
claimer_down(Ref, S = #state{claims = Claims}) ->
    case [N || {N, {_, M}} <- maps:to_list(Claims), M =:= Ref] of
        [] -> S;
        Names -> saved(S#state{claims = maps:without(Names, Claims),
                               claim_aborts = maps:without(Names, S#state.claim_aborts)})
    end.

status_map(S) ->
    #{armed => maps:keys(S#state.armed), limits => S#state.limits,
      aborted => S#state.aborted, reapplied => S#state.reapplied,
      other_tracers => length(S#state.other_tracers),
      other_sessions => length(S#state.other_sessions)}.

%%====================================================================
%% PRIVATE: watching
%%====================================================================

start_watch(S) ->
    _ = try kprof_sink:subscribe() catch _:_ -> ok end,
    Mon = case whereis(kprof_sink) of
              undefined -> undefined;
              Pid -> monitor(process, Pid)
          end,
    erlang:send_after(kprof_guard_watch:tick_ms(), self(), tick),
    sync_clock(),
    S#state{sink_mon = Mon, mem_base = erlang:memory(total),
            watch = kprof_guard_watch:new(now_ms()), port = sink_port()}.

%% Nothing armed any more: the sink's limits are cleared, except after their
%% own trip (`keep'): then the sink goes on limiting the events still on
%% their way, and the next start sets its limits again. The sink's lag bound
%% goes too: with nothing traced, a late event is no alert.
maybe_unwatch(S = #state{armed = Armed}, _SinkLimits) when map_size(Armed) > 0 ->
    S;
maybe_unwatch(S0 = #state{sink_mon = Mon}, SinkLimits) ->
    S = case SinkLimits of
            clear -> set_sink_limits(?NO_SINK_LIMITS, S0);
            keep -> S0
        end,
    send_bound(0),
    _ = try kprof_sink:unsubscribe() catch _:_ -> ok end,
    _ = Mon =/= undefined andalso demonitor(Mon, [flush]),
    S#state{sink_mon = undefined, limits = #{},
            watch = kprof_guard_watch:unwatched(S#state.watch)}.

%% One tick: the figures read here, judged by kprof_guard_watch:tick/3 (the
%% VM-side bounds, max_seconds; max_events and rate are the sink's: see
%% arm_sink_limits/3), then what is due: the port's queue asked, the clock,
%% reloads. Nothing here waits for the sink, its port or another server.
check(S0) ->
    T0 = erlang:monotonic_time(microsecond),
    Now = now_ms(),
    Port = sink_port(),
    S1 = seen_port(Port, S0),
    Since = lists:min([A#armed.since || A <- maps:values(S1#state.armed)]),
    Readings = #{now => Now, port => Port, memory => erlang:memory(total),
                 tracer => case try kprof_tracer:live() catch _:_ -> 0 end of
                               0 -> port;
                               _ -> ring
                           end,
                 ring => try kprof_tracer:ring_info() catch _:_ -> undefined end},
    Bounds = kprof_guard_watch:bounds(S1#state.limits, S1#state.mem_base, Since),
    case kprof_guard_watch:tick(Readings, Bounds, S1#state.watch) of
        {abort, Kind, Info, Watchdog, W} ->
            _ = Watchdog andalso watchdog(Info),
            do_abort(Kind, Info, T0, S1#state{watch = W});
        {ok, Actions, W} ->
            lists:foldl(fun(Action, S) -> act(Action, Now, Port, S) end,
                        S1#state{watch = W}, Actions)
    end.

act(probe, Now, Port, S) ->
    %% port_info(Port, queue_size) waits behind the port's backlog: a
    %% helper asks, the guard reads its answer at a later tick (and how
    %% long it took, by the helper's clock).
    Guard = self(),
    Ref = make_ref(),
    %% The helper runs at the guard's priority: behind the node's busy
    %% processes it would start late, which is no delay of the port's.
    _ = spawn_opt(fun() ->
                          Q = try erlang:port_info(Port, queue_size) catch _:_ -> undefined end,
                          Guard ! {port_queue, Ref, now_ms(), Q}
                  end, [{priority, high}]),
    S#state{watch = kprof_guard_watch:probing(Now, Ref, S#state.watch)};
act(clock, _Now, _Port, S) ->
    sync_clock(),
    S;
act(reload, _Now, _Port, S) ->
    %% A code reload drops the patterns of the module: put them back.
    maps:fold(fun reload_mode/3, S, S#state.armed).

%% The sink's max_events and rate, {MaxEvents, RateMax, RatePerMs} with 0
%% for no bound. The sink counts from its reading of the command: a mode
%% sends it before its flags with events_baseline/1; a mode armed without
%% one gets it here (Fresh: the first mode, whose count starts now; else
%% sent only when the strictest limits changed).
arm_sink_limits(Fresh, Limits, S) ->
    Want = kprof_guard_watch:sink_bounds(Limits),
    case kprof_guard_watch:sink_limits_due(Fresh, Want, S#state.sink_limits) of
        true -> set_sink_limits(Want, S);
        false -> S
    end.

%% Written in order with every other command, the answer not waited for.
set_sink_limits(Want, S = #state{sink_limits = Want}) when Want =:= ?NO_SINK_LIMITS ->
    S;
set_sink_limits(Want = {Max, RateMax, PerMs}, S) ->
    _ = try kprof_sink:send({limits, Max, RateMax, PerMs}) catch _:_ -> ok end,
    S#state{sink_limits = Want}.

%% A mode's patterns put back where a code reload dropped them
%% (kprof_guard_reload), each told to the mode and counted.
reload_mode(Name, A = #armed{patterns = Ps0}, S) ->
    {Ps, N} = kprof_guard_reload:check(session(A), Ps0, fun(Spec) -> reapplied(A, Spec) end),
    S1 = S#state{reapplied = S#state.reapplied + N},
    case Ps of
        Ps0 -> S1;
        _ -> S1#state{armed = maps:put(Name, A#armed{patterns = Ps}, S1#state.armed)}
    end.

%% The mode's reapplied callback, told of a pattern put back: whatever it
%% raises is its own business.
reapplied(#armed{reapplied = F}, Spec) when is_function(F, 1) ->
    _ = try F(Spec) catch _:_ -> ok end,
    ok;
reapplied(_, _Spec) ->
    ok.

%% Where a mode's patterns are: its session, or the legacy API (a mode armed
%% without one set them with erlang:trace_pattern/3).
session(#armed{session = undefined}) -> kprof_trace_session:legacy_api();
session(#armed{session = Session}) -> Session.

%%====================================================================
%% PRIVATE: aborting
%%====================================================================

do_abort(Kind, Info, T0, S) ->
    do_abort(Kind, Info, T0, S, clear).

do_abort(Kind, Info, T0, S0, SinkLimits) ->
    aborted(Kind, Info, T0, claims_aborted(Kind, Info, S0), SinkLimits).

%% The modes that claimed and have not armed are aborted as they arm
%% (the first abort since their claim is theirs).
claims_aborted(Kind, Info, S = #state{claims = Claims, claim_aborts = Aborts}) ->
    S#state{claim_aborts = maps:merge(maps:map(fun(_, _) -> {Kind, Info} end, Claims), Aborts)}.

aborted(_Kind, _Info, _T0, S, _SinkLimits) when map_size(S#state.armed) =:= 0 ->
    S;
aborted(Kind, Info0, T0, S0, SinkLimits) ->
    %% First what stops the cost at once: the tracer NIF writes no more (a
    %% pattern cleared on every module waits for every scheduler, which a
    %% loaded machine makes slow).
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
    _ = [turn_off(Name, A, Kind, Info0, S0#state.port)
         || {Name, A} <- maps:to_list(S0#state.armed)],
    Took = erlang:monotonic_time(microsecond) - T0,
    Info = kprof_guard_memory:explained(Kind, Info0),
    %% Every alert is built by kprof_alert (its message among its keys).
    Msg = maps:get(message, Info),
    logger:warning("kprof: tracing aborted: ~ts (off in ~b us)", [Msg, Took]),
    Abort = #{kind => Kind, info => Info, at => calendar:system_time_to_rfc3339(
                                                   erlang:system_time(second)),
              took_us => Took, message => Msg},
    _ = [Pid ! {kprof_alert, Kind, Info} || Pid <- maps:keys(S0#state.subs)],
    _ = [demonitor(M, [flush]) || #armed{owner_mon = M} <- maps:values(S0#state.armed),
                                  is_reference(M)],
    saved(maybe_unwatch(S0#state{armed = #{}, aborted = Abort}, SinkLimits)).

%% The mode's own abort first (so it can note why), then the net: the
%% patterns it armed (`on_load' among them, first: a module loaded while
%% `'_'' is cleared would get it again), and the flags of every process
%% whose tracer is kprof's (the sink's port, the port watched until now,
%% the tracer NIF); in a trace session of the mode's own, the session is
%% destroyed, which takes all of that off at once.
turn_off(Name, A, Kind, Info, Seen) ->
    %% Logged as a `catch' of the abort told: an exception, or an {'EXIT', _}.
    Failed = fun(Why) -> logger:error("kprof: abort of ~p failed: ~p", [Name, Why]) end,
    _ = try (A#armed.abort)(Kind, Info) of
            {'EXIT', Why} -> Failed(Why);
            _ -> ok
        catch
            throw:{'EXIT', Why} -> Failed(Why);
            throw:_ -> ok;
            error:Reason:Stack -> Failed({Reason, Stack});
            exit:Reason -> Failed(Reason)
        end,
    Session = session(A),
    case kprof_trace_session:legacy(Session) of
        true ->
            Off = fun(MFA, Flags) ->
                          try kprof_trace_session:function(Session, MFA, false, Flags)
                          catch _:_ -> 0
                          end
                  end,
            _ = [Off(MFA, Flags) || {MFA, _, Flags} <- A#armed.patterns],
            All = [Flags || {{'_', '_', '_'}, _, Flags} <- A#armed.patterns],
            _ = [Off({M, '_', '_'}, Flags)
                 || {module, M, _, Flags, _} <- A#armed.patterns, not lists:member(Flags, All)],
            untrace_kprof(Seen);
        false ->
            kprof_trace_session:close(Session)
    end,
    ok.

%% Every trace flag whose tracer is kprof's comes off, before any alert is
%% sent; the NIF writes no more (a process it still traces drops it at its
%% next event, or when anyone asks erlang:trace_info/2 about it). `Seen':
%% the sink's port the guard watched. A kprof_sink killed is not registered
%% until its supervisor restarts it, so kprof_tracers/0 may name no port at
%% all (so it was in every failure of the owner_killed test), and the VM
%% clears the flags of a closed tracer port only at the process's next
%% event, which a process whose patterns are off may never make. Named as
%% the tracer, a closed port still clears the processes it traced
%% (`erlang:trace(all, false, [all, {tracer, Port}])', checked on OTP 25).
untrace_kprof(Seen) ->
    Tracers = lists:usort(kprof_tracers() ++ [{tracer, Seen} || is_port(Seen)]),
    Ours = fun(T) -> kprof_sessions:ours(T) orelse T =:= Seen end,
    Off = fun(Who, T) -> try erlang:trace(Who, false, [all, T]) catch _:_ -> 0 end end,
    _ = case kprof_trace_session:supported() of
            %% (The legacy session of OTP 27+ has OTP's fix: see untrace_each/2.)
            true ->
                [Off(all, T) || T <- Tracers];
            false ->
                _ = kprof_trace_session:untrace_each(
                      fun(P) -> kprof_trace_session:traced_by(P, Ours) end, [all]),
                [Off(Who, T) || Who <- [ports, new], T <- Tracers]
        end,
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
    ok.

%% The sink's port as the guard last saw it (kept when the sink is gone).
seen_port(Port, S) when is_port(Port) -> S#state{port = Port};
seen_port(_Port, S) -> S.

%% @doc kprof's tracers as `erlang:trace/3' takes them: the sink's port and
%% the tracer NIF's live generation, whichever exist.
-spec kprof_tracers() -> [{tracer, port()} | {tracer, kprof_tracer, pos_integer()}].
kprof_tracers() ->
    Port = [{tracer, P} || P <- [sink_port()], P =/= undefined],
    Nif = try kprof_tracer:live() of
              Gen when is_integer(Gen), Gen > 0 -> [{tracer, kprof_tracer, Gen}];
              _ -> []
          catch
              _:_ -> []
          end,
    Port ++ Nif.

%% The servers that set modes up died: their tracing goes (the mode's own
%% abort function tells its callers, e.g. a capture's owner ends with the
%% files so far); the other modes go on.
owner_down(Names, Pid, Reason, S0 = #state{armed = Armed}) ->
    T0 = erlang:monotonic_time(microsecond),
    Info = kprof_alert:new(owner_down, owner, Reason, undefined,
                           #{owner => Pid, reason => Reason, modes => Names}),
    _ = [turn_off(N, maps:get(N, Armed), owner_down, Info, S0#state.port) || N <- Names],
    Took = erlang:monotonic_time(microsecond) - T0,
    Msg = maps:get(message, Info),
    logger:warning("kprof: ~ts (off in ~b us)", [Msg, Took]),
    _ = [P ! {kprof_alert, owner_down, Info} || P <- maps:keys(S0#state.subs)],
    Abort = #{kind => owner_down, info => Info,
              at => calendar:system_time_to_rfc3339(erlang:system_time(second)),
              took_us => Took, message => Msg},
    saved(maybe_unwatch(S0#state{armed = maps:without(Names, Armed), aborted = Abort}, clear)).

%% After an abort because the sink stopped reading: if it still does not
%% answer a ping within ?WATCHDOG_MS, it is killed; kprof_sink starts a new one.
watchdog(Info) ->
    _ = spawn(fun() ->
                      %% What the ping raised is the restart's reason, as a
                      %% `catch' gives it.
                      Answered = fun(pong) -> ok;
                                    (Other) -> kprof_sink:restart({unresponsive, Info, Other})
                                 end,
                      try kprof_sink:command(ping, ?WATCHDOG_MS) of
                          Answer -> Answered(Answer)
                      catch
                          throw:Thrown -> Answered(Thrown);
                          error:Reason:Stack -> Answered({'EXIT', {Reason, Stack}});
                          exit:Reason -> Answered({'EXIT', Reason})
                      end
              end),
    ok.

%%====================================================================
%% PRIVATE: the record a restarted guard starts from
%%====================================================================

%% Everything but monitors and timers, after every change a restarted guard
%% must know of.
saved(S = #state{armed = Armed, subs = Subs}) ->
    kprof_records:put(?MODULE, #{armed => maps:map(fun(_, A) -> A#armed{owner_mon = undefined} end,
                                                   Armed),
                                 claims => maps:map(fun(_, {P, _}) -> P end, S#state.claims),
                                 subs => maps:keys(Subs), limits => S#state.limits,
                                 mem_base => S#state.mem_base, sink_limits => S#state.sink_limits,
                                 aborted => S#state.aborted, reapplied => S#state.reapplied}),
    S.

restore(R = #{armed := Armed0, subs := Subs, limits := Limits, mem_base := MemBase,
              sink_limits := SinkLimits, aborted := Aborted, reapplied := Reapplied}) ->
    S0 = #state{subs = maps:from_list([{P, monitor(process, P)} || P <- Subs]),
                claims = claims(R), limits = Limits, sink_limits = SinkLimits,
                aborted = Aborted, reapplied = Reapplied},
    Armed = maps:map(fun(_, A = #armed{owner = O}) when is_pid(O) ->
                             A#armed{owner_mon = monitor(process, O)};
                        (_, A) ->
                             A
                     end, Armed0),
    S1 = start_watch(S0#state{armed = Armed}),
    logger:notice("kprof_guard: restarted; watching ~p again", [maps:keys(Armed)]),
    saved(S1#state{mem_base = MemBase}).

%% The claims a killed guard left, their processes monitored again (one
%% gone meanwhile: its claim with it, at its 'DOWN').
claims(R) ->
    maps:map(fun(_, P) -> {P, monitor(process, P)} end, maps:get(claims, R, #{})).

%%====================================================================
%% PRIVATE: helpers
%%====================================================================

%% What a busy answer calls an armed mode.
mode_name({kprof_flame, _Id}) -> flame;
mode_name(Name) -> Name.

warn_other_tracers([]) ->
    ok;
warn_other_tracers(Others = [{P, T} | _]) ->
    logger:warning("kprof: ~b process(es) already have another tracer (recon_trace, dbg before"
                   " OTP 27, ...), so kprof cannot trace them and their calls will be missing;"
                   " e.g. ~p is traced by ~p. Stop that tracer (recon_trace:clear/0,"
                   " dbg:stop/0) and start kprof's tracing again.",
                   [length(Others), P, T]).

%% OTP 27 and later: other sessions do not keep kprof out, but their events
%% cost the same processes, and kprof refuses gc => true beside theirs.
warn_other_sessions([]) ->
    ok;
warn_other_sessions(Others = [{P, T} | _]) ->
    logger:notice("kprof: ~b process(es) are also traced by another trace session (dbg's, ...):"
                  " kprof traces them too, and both tracers' costs add up; e.g. ~p is traced"
                  " by ~p.", [length(Others), P, T]).

%% A command whose reply comes back as {sink_reply, Cmd, Reply}: the guard
%% itself never waits behind a port queue.
async(Cmd) ->
    Guard = self(),
    _ = spawn(fun() ->
                      Reply = try kprof_sink:command(Cmd, 1000, [nosuspend])
                              catch Class:Reason -> {Class, Reason}
                              end,
                      Guard ! {sink_reply, Cmd, Reply}
              end),
    ok.

sync_clock() ->
    async({clock, erlang:monotonic_time(nanosecond)}).

%% The lag bound, written in order with every other command (kprof_sink:send/1,
%% which never waits behind the port): a bound of 0 sent as the last mode
%% ends must reach the sink before the next mode's, or that mode would run
%% unwatched, and the sink drops the alerts it still owed when it reads the
%% 0 (port/sink/control.c), which were about events read before.
send_overload_bound(#state{limits = #{max_lag_ms := infinity}}) ->
    send_bound(0);
send_overload_bound(#state{limits = #{max_lag_ms := Ms}}) ->
    send_bound(Ms);
send_overload_bound(_) ->
    ok.

send_bound(Ms) ->
    _ = try kprof_sink:send({overload, Ms}) catch _:_ -> ok end,
    ok.

sink_port() ->
    case whereis(kprof_sink) of
        undefined -> undefined;
        _ -> try kprof_sink:port() of
                 P when is_port(P) -> P;
                 _ -> undefined
             catch
                 _:_ -> undefined
             end
    end.
%% (kprof_sink:port/0 reads a persistent_term: it answers even while the
%% server is suspended on a busy port.)

now_ms() ->
    erlang:monotonic_time(millisecond).
