%%% @doc The one place that changes the VM's trace patterns and flags for
%%% flame captures (see {@link kprof_flame} and doc/internals-flame.md).
%%%
%%% Several captures may run at once; they share the call pattern on every
%%% function (`{'_','_','_'}' and `on_load', local), set when the first
%%% capture opens and cleared when the last one closes, or, while web
%%% captures are allowed, `keep_patterns_ms' later ({@link kprof_web_gate};
%%% 1 s by default): a capture opening meanwhile finds them set. Setting and
%%% clearing them stops the node for tens of milliseconds with 100,000
%%% functions loaded, while set they make every call of every process slower,
%%% traced or not (bench/RESULTS.md, "Web capture cost"). The tiers and calls
%%% sessions ask for them to go at once ({@link release_patterns/0}). Their
%%% match spec is `true' (no match spec: the VM's cheapest call event; the
%%% sink builds stacks from calls and return_tos, port/callpath/stacks.c), or
%%% `[{'_', [], [{message, {caller}}]}]' while a capture with `callers =>
%%% true' is open (every call's caller: the BEAM's own stacks, at a higher
%%% cost per call). Processes traced by two captures
%%% keep their flags until both are done. A flame_capture trigger has a
%%% meta pattern of its own; one capture per trigger function at a time.
%%%
%%% The tracer is the one {@link kprof_sink:tracer/0} gives: by default the
%%% `kprof_tracer' NIF, whose events go through the sink's ring, or the
%%% sink's port (application env `{tracer, port}'). On OTP 27 and later the
%%% captures trace in a trace session of kprof's own, `kprof_flame'
%%% ({@link kprof_trace_session}), opened with the first capture and
%%% destroyed with the call patterns (the last close, or `keep_patterns_ms'
%%% later): its flags, patterns and the triggers' meta patterns are
%%% kprof's alone, and destroying it takes all of them off. Before OTP 27
%%% they trace with `erlang:trace/3'; a trigger's meta pattern then has the
%%% matching meta tracer (`{meta, kprof_tracer, {meta, Gen}}' or `{meta,
%%% Port}'), and when the last capture closes the NIF is detached: a
%%% process that kept flags somehow drops them at its next event.
%%%
%%% A permanent child of `kprof_sup', started with kprof. It monitors each
%%% capture's owner: when the owner dies, its capture is closed and dropped
%%% from the sink, so no pattern or flag outlives it. It traps exits, so
%%% stopping kprof (`kprof:stop()', the application stopping) closes every
%%% capture in `terminate/2'. What it has set is written to
%%% {@link kprof_records}: killed, it is restarted by the supervisor, and the
%%% new server takes off whatever the old one left (patterns, `on_load', the
%%% triggers' meta patterns, the flags of every process kprof traces) and
%%% tells each capture's owner `{kprof_flame_aborted, Id, server_down}': the
%%% capture ends with the files of what the sink had (`kprof_guard', which
%%% watched the old server as the captures' owner, does the same from its
%%% side).
%%%
%%% A process has one tracer per session: before OTP 27, a capture of
%%% processes that another tracer (dbg, recon_trace, the tracer NIF of
%%% kprof's tiers) has already is refused with `{error, {traced_by_other,
%%% Pid, Tracer}}' and a warning that says which, rather than tracing
%%% nothing and looking idle. From OTP 27 kprof's session is its own, and
%%% the capture traces beside them.
%%%
%%% Each capture arms {@link kprof_guard} (when it runs) with its limits
%%% and its patterns (the trigger's meta pattern among them, put back after
%%% a code reload of its module); `max_events' counts from before the
%%% capture's flags and patterns are set. On overload (trace messages older
%%% than `max_lag_ms' when the sink reads them, the port's queue over
%%% `max_queue_bytes', ...) the guard turns the tracing off at once, and
%%% the capture's owner gets
%%% `{kprof_flame_aborted, Id, Kind}': the capture ends with what the sink
%%% has, instead of the VM's port queue growing without bound.
-module(kprof_flame_srv).
-behaviour(gen_server).

%% PUBLIC (for the captures: kprof_flame, kprof_flame_calib; kprof_flame_run
%% and kprof_flame_trace set a capture's flags)
-export([open/3, close/1, done/1, stop_trigger/1, release_patterns/0]).
%% PUBLIC (for kprof:cancel/0)
-export([cancel/0]).
%% Internal: the sink's start options, for their test.
-export([start_opts/2]).
%% gen_server callbacks
-export([start_link/0, init/1, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2, code_change/3]).

-define(SERVER, ?MODULE).
-define(CALL_TIMEOUT, 60000).
%% A call not answered in this long is said (call/1).
-define(LATE_MS, 5000).
%% The call patterns' match spec: none, or {caller} for a capture with callers => true.
-type spec() :: kprof_flame_trace:spec().

-record(cap, {owner :: pid(),
              mref :: reference(),
              mode :: apply | pid | capture,
              pids = [] :: [pid()],              % traced by this server (pid mode)
              trigger :: mfa() | undefined,
              children = false :: boolean(),
              callers = false :: boolean(),
              tracer :: tuple(),
              %% The trace session it traces in (kprof_trace_session).
              session :: kprof_trace_session:session()}).

-record(state, {caps = #{} :: #{integer() => #cap{}},
                %% Closed captures whose files are being written: the
                %% owner and its monitor (the guard is still armed for them).
                writing = #{} :: #{integer() => {pid(), reference()}},
                %% A capture that joins processes as it runs (a trigger, or
                %% children) was open since the last full close: sweep then.
                dynamic = false :: boolean(),
                refs = #{} :: #{pid() => pos_integer()},    % pid mode flags, per process
                patterns = none :: none | spec(),            % the call patterns set
                %% No capture open, the patterns kept until this timer fires.
                keep :: reference() | undefined,
                %% Where the captures trace (kprof_trace_session): from the
                %% first capture's open to the patterns' clearing; a new
                %% one when the tracer changes or the guard destroyed it.
                session :: kprof_trace_session:session() | undefined}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Register capture `Id' of the caller with the sink and set up the
%% VM for it. `Cfg' holds the validated options, and `pids' and `hide'
%% (apply: the caller's wrapping frame, left out of the stacks), `pids'
%% (pid), or `trigger' and `ncalls' (capture). Returns the trace flags of the
%% capture (its tracer and its trace session among them) for the caller to
%% set on itself (flame_apply, {@link kprof_flame_trace:set_flags/2}). Before OTP 27, a
%% process of `pids' that has a tracer other than kprof's gives `{error,
%% {traced_by_other, Pid, Tracer}}' and a warning; nothing is set up. From
%% OTP 27, `gc => true' while another trace session traces
%% garbage collection on a process the capture would trace gives
%% `{error, {gc_traced_by_other_session, Pid | new, Tracer}}' and a warning
%% (kprof_sessions: on OTP 27 to 29 that crashes the emulator). While the
%% tiers or a calls session run: `{error, {busy, Mode}}' ({@link
%% kprof_guard:claim/1}).
-spec open(integer(), apply | pid | capture, map()) -> {ok, list()} | {error, term()}.
open(Id, Mode, Cfg) ->
    case ensure_started() of
        ok ->
            case kprof_guard:claim({kprof_flame, Id}) of
                ok -> claimed(Id, Mode, Cfg);
                {error, _} = Busy -> Busy
            end;
        Error ->
            Error
    end.

%% The capture holds the guard's claim: anything but a start lets it go.
-spec claimed(integer(), apply | pid | capture, map()) -> {ok, list()} | {error, term()}.
claimed(Id, Mode, Cfg) ->
    case opened(Id, Mode, Cfg) of
        {ok, _} = Ok -> Ok;
        {error, _} = Error -> disarm(Id), Error
    end.

-spec opened(integer(), apply | pid | capture, map()) -> {ok, list()} | {error, term()}.
opened(Id, Mode, Cfg) ->
    case kprof_flame_trace:traced_by_other(maps:get(pids, Cfg, [])) of
        [] ->
            case gc_conflict(Mode, Cfg) of
                none ->
                    open_in_sink(Id, Mode, Cfg);
                {Who, Tracer} ->
                    warn_gc(Who, Tracer),
                    {error, {gc_traced_by_other_session, Who, Tracer}}
            end;
        Others = [{Pid, Tracer} | _] ->
            warn_traced(Others),
            {error, {traced_by_other, Pid, Tracer}}
    end.

%% What waits for the sink is done here, in the caller, never in the
%% server: a sink behind on its input (a port's backlog) slows this capture's
%% start, not the end of the others.
-spec open_in_sink(integer(), apply | pid | capture, map()) -> {ok, list()} | {error, term()}.
open_in_sink(Id, Mode, Cfg0) ->
    case kprof_sink:tracer() of
        {error, Reason} ->
            {error, {sink, Reason}};
        Tracer ->
            Cfg = Cfg0#{tracer => Tracer},
            case sink_start(Id, Mode, Cfg) of
                ok ->
                    %% max_events counts from here, before any flag or pattern of ours.
                    E0 = kprof_guard:events_baseline(maps:get(limits, Cfg, #{})),
                    case call({open, Id, Mode, Cfg#{events0 => E0}, self()}) of
                        {ok, Flags} ->
                            _ = maps:is_key(trigger, Cfg)
                                andalso kprof_sink:command({flame_arm, Id}),
                            {ok, Flags};
                        {error, _} = Error ->
                            _ = kprof_sink:send({flame_drop, Id}),
                            Error
                    end;
                {error, _} = Error ->
                    Error
            end
    end.

%% @doc Undo what {@link open/3} did for `Id': its patterns and flags come
%% off. The sink keeps the capture until `flame_write' or `flame_drop', and
%% the guard stays armed for it until {@link done/1}: an overload while the
%% sink still reads the capture's events aborts it, and is said.
-spec close(integer()) -> ok | {error, term()}.
close(Id) ->
    case call({close, Id}) of
        {ok, members} ->
            %% Processes that joined by a trigger call or a spawn are the
            %% sink's to know: those in no other capture come off too.
            case kprof_sink:command({flame_members, Id, own}) of
                Pids when is_list(Pids) -> call({untrace, Pids});
                _ -> ok
            end;
        {ok, none} ->
            ok;
        Other ->
            Other
    end.

%% @doc The capture's files are written (or it failed): the guard is
%% disarmed for it.
-spec done(integer()) -> ok | {error, term()}.
done(Id) ->
    call({done, Id}).

%% @doc Remove a capture's trigger pattern: it has all the calls it wants.
-spec stop_trigger(integer()) -> ok | {error, term()}.
stop_trigger(Id) ->
    call({stop_trigger, Id}).

%% @doc The call patterns kept after the last capture (`keep_patterns_ms')
%% are cleared now: the tiers and calls sessions set patterns of their own
%% on processes that all have the `call' flag. `ok' also when none were kept
%% or kprof is not running.
-spec release_patterns() -> ok.
release_patterns() ->
    case whereis(?SERVER) of
        undefined -> ok;
        _ -> _ = call(release_patterns), ok
    end.

%% @doc End every open capture now, as a guard abort would, with the kind
%% `cancelled': its tracing comes off here, at once (a flame_apply's
%% function may run on, untraced), and its owner gets
%% `{kprof_flame_end, Id, MonotonicNs}' (when tracing stopped) then
%% `{kprof_flame_aborted, Id, cancelled}', and writes the files of what was
%% traced until then. The number of captures ended; `{error, not_running}'
%% when kprof is not.
-spec cancel() -> non_neg_integer() | {error, term()}.
cancel() ->
    call(cancel).

%% @private
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?SERVER}, ?MODULE, [], []).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% GEN_SERVER CALLBACKS       %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% @private
-spec init([]) -> {ok, #state{}}.
init([]) ->
    process_flag(trap_exit, true),
    case kprof_records:get(?SERVER) of
        #{caps := Caps, writing := Writing} = R when map_size(Caps) + map_size(Writing) > 0 ->
            undo(R);
        #{kept := true} ->
            %% Between captures, the patterns kept: nobody's now.
            kprof_flame_trace:undo([]);
        _ ->
            ok
    end,
    {ok, saved(#state{})}.

%% What a killed predecessor left: patterns, triggers, flags, every one.
-spec undo(map()) -> ok.
undo(#{caps := Caps, writing := Writing}) ->
    logger:warning("kprof flame: the flame server was restarted with ~b capture(s) open; "
                   "their tracing is turned off, they end with what the sink has",
                   [map_size(Caps) + map_size(Writing)]),
    kprof_flame_trace:undo([T || #{trigger := T} <- maps:values(Caps), T =/= undefined]),
    _ = [Owner ! {kprof_flame_aborted, Id, server_down}
         || {Id, Owner} <- [{I, O} || {I, #{owner := O}} <- maps:to_list(Caps)]
                ++ maps:to_list(Writing)],
    ok.

%% The record a restarted server undoes (kprof_records).
-spec saved(#state{}) -> #state{}.
saved(S = #state{caps = Caps, writing = Writing, keep = Keep}) ->
    kprof_records:put(?SERVER, #{caps => maps:map(fun(_, #cap{owner = O, trigger = T}) ->
                                                          #{owner => O, trigger => T}
                                                  end, Caps),
                                 writing => maps:map(fun(_, {Owner, _MRef}) -> Owner end,
                                                     Writing),
                                 kept => Keep =/= undefined}),
    S.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) -> {reply, term(), #state{}}.
handle_call(Request, From, S) ->
    {reply, Reply, S1} = call_(Request, From, S),
    {reply, Reply, saved(S1)}.

call_({open, Id, Mode, Cfg, Owner}, _From, S) ->
    case do_open(Id, Mode, Cfg, Owner, S) of
        {ok, Flags, S1} -> {reply, {ok, Flags}, S1};
        {error, Error, S1} -> {reply, Error, S1}
    end;
call_({close, Id}, _From, S = #state{caps = Caps}) ->
    Joins = case Caps of
                #{Id := #cap{mode = capture}} -> members;
                #{Id := #cap{children = true}} -> members;
                _ -> none
            end,
    {reply, {ok, Joins}, do_close(Id, keep_guard, S)};
call_({untrace, Pids}, _From, S) ->
    Keep = kept(S),
    _ = [untrace(P, S#state.session) || P <- Pids, not maps:is_key(P, Keep)],
    {reply, ok, S};
call_({done, Id}, _From, S = #state{writing = W}) ->
    case maps:take(Id, W) of
        {{_Owner, MRef}, Rest} ->
            erlang:demonitor(MRef, [flush]),
            disarm(Id),
            {reply, ok, S#state{writing = Rest}};
        error ->
            {reply, ok, S}
    end;
call_({stop_trigger, Id}, _From, S = #state{caps = Caps}) ->
    case Caps of
        #{Id := #cap{trigger = MFA} = Cap} when MFA =/= undefined ->
            %% The guard first, or it would take the pattern for one a code
            %% reload dropped and put it back.
            _ = try kprof_guard:watch_patterns({kprof_flame, Id},
                                               kprof_flame_trace:call_patterns(S#state.patterns))
                catch _:_ -> ok
                end,
            kprof_flame_trace:untrigger(MFA, Cap#cap.session),
            {reply, ok, S};
        _ ->
            {reply, ok, S}
    end;
call_(cancel, _From, S = #state{caps = Caps}) ->
    End = erlang:monotonic_time(nanosecond),
    S1 = maps:fold(fun(Id, #cap{owner = Owner}, Acc) ->
                           Acc1 = do_close(Id, keep_guard, Acc),
                           Owner ! {kprof_flame_end, Id, End},
                           Owner ! {kprof_flame_aborted, Id, cancelled},
                           Acc1
                   end, S, Caps),
    %% Processes that joined as they ran (children, trigger calls): the
    %% last close swept them only when the server knew of them.
    _ = map_size(Caps) > 0 andalso kprof_flame_trace:sweep(S1#state.session),
    {reply, map_size(Caps), S1};
call_(release_patterns, _From, S) ->
    {reply, ok, unkeep(S)};
call_(_Other, _From, S) ->
    {reply, {error, bad_call}, S}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}}.
handle_info(Msg, S) ->
    {noreply, S1} = info_(Msg, S),
    {noreply, saved(S1)}.

info_({guard_abort, Id, _Kind}, S = #state{caps = Caps, session = Current}) ->
    {Cap, Session} = case Caps of
                         #{Id := C = #cap{session = Sn}} -> {C, Sn};
                         _ -> {undefined, Current}
                     end,
    case Session =:= undefined orelse kprof_trace_session:legacy(Session) of
        true ->
            %% The guard took the flags off and the '_' pattern; the rest
            %% is ours.
            _ = Cap =/= undefined andalso kprof_flame_trace:untrigger(Cap#cap.trigger, Session),
            _ = kprof_trace_session:supported()
                orelse erlang:trace_pattern(on_load, false, [local]),
            {noreply, S#state{patterns = none}};
        false ->
            %% The guard destroyed the capture's session (all of it off); a
            %% session opened since is another's.
            kprof_trace_session:close(Session),
            case Session =:= Current of
                true -> {noreply, S#state{session = undefined, patterns = none}};
                false -> {noreply, S}
            end
    end;
info_({'DOWN', MRef, process, _Pid, _Reason}, S = #state{caps = Caps, writing = W}) ->
    case [Id || {Id, #cap{mref = R}} <- maps:to_list(Caps), R =:= MRef] ++
         [Id || {Id, {_, R}} <- maps:to_list(W), R =:= MRef] of
        [Id] ->
            S1 = do_close(Id, disarm, S),
            disarm(Id),
            _ = kprof_sink:send({flame_drop, Id}),
            {noreply, S1#state{writing = maps:remove(Id, W)}};
        [] ->
            {noreply, S}
    end;
info_({timeout, Ref, keep_patterns}, S = #state{keep = Ref}) ->
    {noreply, unkeep(S)};
info_(_Msg, S) ->
    {noreply, S}.

%% @private
%% kprof stopping: every capture closed, nothing left for a successor.
-spec terminate(term(), #state{}) -> ok.
terminate(_Reason, S = #state{caps = Caps, writing = W}) ->
    %% Closing the last may keep the patterns: they go at once.
    _ = unkeep(lists:foldl(fun(Id, S1) -> do_close(Id, disarm, S1) end, S, maps:keys(Caps))),
    _ = [disarm(Id) || Id <- maps:keys(W)],
    kprof_records:delete(?SERVER),
    ok.

%% @private
-spec code_change(term(), #state{}, term()) -> {ok, #state{}}.
code_change(_OldVsn, S, _Extra) ->
    {ok, S}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec ensure_started() -> ok | {error, term()}.
ensure_started() ->
    case whereis(?SERVER) of
        Pid when is_pid(Pid) -> ok;
        undefined -> {error, not_running}
    end.

%% A call the server has not answered in ?LATE_MS is said once (where the
%% server is: kprof_late_call), and waited for up to ?CALL_TIMEOUT in all.
-spec call(term()) -> term().
call(Request) ->
    kprof_late_call:call(?SERVER, Request, ?LATE_MS, ?CALL_TIMEOUT).

%% The VM's part of a capture: nothing here waits for the sink (the caller
%% did that in open_in_sink/3, and tells the sink flame_arm after this).
%% A capture that fails to open leaves the state as it found it, the kept
%% patterns' timer again among it.
-spec do_open(integer(), apply | pid | capture, map(), pid(), #state{}) ->
          {ok, list(), #state{}} | {error, {error, term()}, #state{}}.
do_open(Id, Mode, Cfg, Owner, S0) ->
    case session_for(maps:get(tracer, Cfg), cancel_keep(S0)) of
        {ok, S} ->
            try open_traced(Id, Mode, Cfg, Owner, S) of
                {ok, _, _} = Opened -> Opened;
                {error, _} = Error -> {error, Error, idle(S)}
            catch
                %% The guard destroyed the session meanwhile (an abort). (A
                %% monitor of the owner may be left: its 'DOWN' names no
                %% capture.)
                error:badarg ->
                    disarm(Id),
                    {error, {error, {trace_session, destroyed}}, idle(S)}
            end;
        {error, Why, S} ->
            {error, {error, {trace_session, Why}}, idle(S)}
    end.

-spec open_traced(integer(), apply | pid | capture, map(), pid(), #state{}) ->
          {ok, list(), #state{}} | {error, term()}.
open_traced(Id, Mode, Cfg, Owner, S = #state{caps = Caps, session = Session}) ->
    Trigger = maps:get(trigger, Cfg, undefined),
    Callers = maps:get(callers, Cfg, false),
    %% {caller} while any open capture wants it; never taken away from one
    %% (patterns kept with no capture open are nobody's).
    Spec = case Callers orelse (S#state.patterns =:= callers andalso map_size(Caps) > 0) of
               true -> callers;
               false -> true
           end,
    %% The guard first: the sink counts max_events and rate from events0,
    %% and a limit that trips on the first events (before the capture was
    %% armed, the guard had nothing to abort, the sink went on refusing the
    %% capture its events, and it waited for its timeout) finds it armed.
    MRef = erlang:monitor(process, Owner),
    arm_guard(Id, Owner, Cfg, maps:get(events0, Cfg, undefined), Spec, Session),
    %% The trigger before the call patterns (see set_trigger/4).
    case kprof_flame_trace:set_trigger(Trigger, Id, Cfg, Session) of
        ok ->
            Spec =/= S#state.patterns andalso kprof_flame_trace:set_patterns(Spec, Session),
            Cap = #cap{owner = Owner, mref = MRef,
                       mode = Mode, trigger = Trigger, callers = Callers,
                       children = maps:get(children, Cfg), tracer = maps:get(tracer, Cfg),
                       session = Session},
            S1 = S#state{caps = Caps#{Id => Cap}, patterns = Spec,
                         dynamic = S#state.dynamic orelse Mode =:= capture
                             orelse maps:get(children, Cfg)},
            Flags = kprof_flame_trace:flags(Cfg, maps:get(tracer, Cfg))
                ++ [{kprof_trace_session, kprof_trace_session:weak(Session)}],
            {ok, Flags, trace_pids(Id, Mode, Cfg, Flags, S1)};
        {error, _} = Error ->
            erlang:demonitor(MRef, [flush]),
            disarm(Id),
            Error
    end.

%% The session the captures trace in, for this tracer: the one open, or a
%% new one when there is none, the tracer changed (a new generation of the
%% NIF after a detach) or the guard destroyed it. A new session has none of
%% the patterns (on the legacy API they stay: they name no tracer).
-spec session_for(tuple(), #state{}) -> {ok, #state{}} | {error, term(), #state{}}.
session_for(Tracer, S = #state{session = Old}) ->
    Same = Old =/= undefined andalso kprof_trace_session:tracer(Old) =:= Tracer
        andalso kprof_trace_session:alive(Old),
    case Same of
        true ->
            {ok, S};
        false ->
            _ = Old =/= undefined andalso kprof_trace_session:close(Old),
            case kprof_trace_session:open(kprof_flame, Tracer) of
                {ok, New} ->
                    Patterns = case kprof_trace_session:legacy(New) of
                                   true -> S#state.patterns;
                                   false -> none
                               end,
                    {ok, S#state{session = New, patterns = Patterns}};
                {error, Why} ->
                    {error, Why, S#state{session = undefined, patterns = none}}
            end
    end.

%% No capture open after all (one failed to open): the patterns are kept
%% again, or cleared.
-spec idle(#state{}) -> #state{}.
idle(S = #state{caps = Caps}) when map_size(Caps) > 0 ->
    S;
idle(S) ->
    keep_or_clear(S).

%% The guard lets capture Id go (a guard gone, or down: nothing to let go).
-spec disarm(integer()) -> ok.
disarm(Id) ->
    _ = try kprof_guard:disarm({kprof_flame, Id}) catch _:_ -> ok end,
    ok.

%% A capture with gc => true, and another trace session tracing garbage
%% collection on a process it would trace (kprof_sessions).
-spec gc_conflict(apply | pid | capture, map()) -> none | {pid() | new, term()}.
gc_conflict(Mode, Cfg) ->
    case maps:get(gc, Cfg) of
        false -> none;
        true when Mode =:= capture -> kprof_sessions:gc_conflict(all);
        true -> kprof_sessions:gc_conflict({maps:get(pids, Cfg, []), maps:get(children, Cfg)})
    end.

-spec warn_gc(pid() | new, term()) -> ok.
warn_gc(Who, Tracer) ->
    logger:warning("kprof flame: another trace session (tracer ~p) traces garbage collection "
                   "on ~p; two sessions tracing it on the same process crash the emulator on "
                   "OTP 27 to 29 (issue 11624 in OTP's tracker), so nothing was captured. Capture "
                   "with gc => false, or end that session first.", [Tracer, Who]).

-spec warn_traced([{pid(), term()}]) -> ok.
warn_traced([{Pid, Tracer} | More]) ->
    {Who, Stop} = case kprof_sessions:ours(Tracer) of
                      true -> {"the tracer NIF of kprof's tiers", "kprof:stop_tiers/0"};
                      false -> {"another tracer (recon_trace, dbg before OTP 27, ...)",
                                "recon_trace:clear/0, dbg:stop/0"}
                  end,
    Others = case length(More) of
                 0 -> "";
                 N -> io_lib:format(" (and ~b more of the processes asked for)", [N])
             end,
    logger:warning("kprof flame: ~p~ts is traced by ~p, ~ts; a process has one tracer, so "
                   "kprof cannot trace it and nothing was captured. Stop that tracer (~ts) "
                   "and try again.", [Pid, Others, Tracer, Who, Stop]).

%% The capture in the sink: options, then its processes with their names.
%% On any failure a flame_drop follows, in order, unwaited: a sink that did
%% not answer in time still has the capture once it reads again, and would
%% keep it (and refuse the tiers) for ever.
-spec sink_start(integer(), apply | pid | capture, map()) -> ok | {error, term()}.
sink_start(Id, Mode, Cfg) ->
    case kprof_sink:command({flame_start, Id, start_opts(Mode, Cfg)}) of
        ok when Mode =:= capture ->
            ok;
        ok ->
            Pids = [{P, kprof_flame_labels:name_of(P), kprof_flame_labels:call_of(P, Cfg)}
                    || P <- maps:get(pids, Cfg)],
            case kprof_sink:command({flame_pids, Id, Pids}) of
                ok -> ok;
                Error -> _ = kprof_sink:send({flame_drop, Id}), sink_error(Error)
            end;
        Error ->
            _ = kprof_sink:send({flame_drop, Id}),
            sink_error(kprof_flame_record:start_error(Error, Cfg))
    end.

%% @doc The options of the sink's `flame_start' for a capture: the user's
%% options the sink takes too (the table's `both' rows, {@link
%% kprof_opts:forwarded/1}), then the `sink' rows kprof sets itself:
%% `correct_ns' and the mode's own (`max_stack' is left at the sink's
%% default).
-spec start_opts(apply | pid | capture, map()) -> [{atom(), term()}].
start_opts(Mode, Cfg) ->
    %% A row without a default (record) is sent only when given.
    Given = maps:merge(kprof_opts:defaults(flame), Cfg#{group => group(Cfg)}),
    [{K, kprof_flame_record:sink_value(K, maps:get(K, Given))}
     || K <- kprof_opts:forwarded(flame), is_map_key(K, Given)]
        ++ [{correct_ns, maps:get(correct_ns, Cfg, 0)} | mode_opts(Mode, Cfg)].

-spec mode_opts(apply | pid | capture, map()) -> [{atom(), term()}].
mode_opts(apply, #{hide := Frame}) ->
    %% The frame kprof_flame:apply/2 wraps the user's function in.
    [{hide, Frame}];
mode_opts(pid, _Cfg) ->
    [];
mode_opts(capture, Cfg) ->
    [{trigger, maps:get(trigger, Cfg)}, {ncalls, maps:get(ncalls, Cfg)}, {hold, true},
     {time_offset, erlang:time_offset(nanosecond)}].

%% What the sink answered, as the capture's error: its own refusals as they
%% are ({busy, tiers}, too_many_captures, ...); a sink that did not answer,
%% died or is not running as {sink, Why}, so a caller tells them apart from
%% a capture's own `timeout' (flame_capture's wait).
-spec sink_error(term()) -> {error, term()}.
sink_error({error, Why}) when Why =:= timeout; Why =:= not_running -> {error, {sink, Why}};
sink_error({error, {sink_down, _} = Why}) -> {error, {sink, Why}};
sink_error({error, _} = E) -> E;
sink_error(Other) -> {error, {sink, Other}}.

%% How the processes are merged at the root when written: as asked, else by
%% initial call when spawned processes are followed (50 workers of one kind
%% read as one), else one root per process.
-spec group(map()) -> pid | name | initial_call | all.
group(#{group := G}) -> G;
group(#{children := true}) -> initial_call;
group(_) -> pid.

%% The guard's abort runs in the guard: it only sends messages. The trigger's
%% meta pattern is the guard's to watch too: a code reload of its module
%% drops it (the shared `'_'' pattern stands for every module, which the
%% guard does not check one by one; `on_load' covers reloaded modules). The
%% guard gets the session (weak: it does not keep it alive), and destroys it
%% when it aborts.
-spec arm_guard(integer(), pid(), map(), non_neg_integer() | undefined, spec(),
                kprof_trace_session:session()) -> ok.
arm_guard(Id, Owner, Cfg, E0, Spec, Session) ->
    Srv = self(),
    Abort = fun(Kind, _Info) ->
                    Srv ! {guard_abort, Id, Kind},
                    Owner ! {kprof_flame_aborted, Id, Kind}
            end,
    Trigger = case maps:get(trigger, Cfg, undefined) of
                  undefined -> [];
                  MFA -> [{MFA, kprof_flame_trace:trigger_ms(Id, Cfg, Session), [meta]}]
              end,
    Arm0 = #{abort => Abort, owner => Srv, session => kprof_trace_session:weak(Session),
             patterns => kprof_flame_trace:call_patterns(Spec) ++ Trigger},
    Arm = case E0 of
              undefined -> Arm0;
              _ -> Arm0#{events0 => E0}
          end,
    Limits = case maps:get(limits, Cfg, #{}) of
                 L when map_size(L) =:= 0 -> #{};
                 L -> #{limits => L}
             end,
    case whereis(kprof_guard) of
        undefined ->
            ok;
        _ ->
            %% What the call raises is a refusal too, as a `catch' gives it.
            Armed = fun(ok) -> ok;
                       (Other) -> logger:warning("kprof flame: the guard refused to arm: ~p",
                                                 [Other])
                    end,
            try kprof_guard:arm({kprof_flame, Id}, maps:merge(Arm, Limits)) of
                Answer -> Armed(Answer)
            catch
                throw:Thrown -> Armed(Thrown);
                error:Reason:Stack -> Armed({'EXIT', {Reason, Stack}});
                exit:Reason -> Armed({'EXIT', Reason})
            end
    end.

-spec trace_pids(integer(), apply | pid | capture, map(), list(), #state{}) -> #state{}.
trace_pids(Id, pid, Cfg, Flags, S = #state{caps = Caps, refs = Refs}) ->
    %% Each process's state before its flags, as the event it stands for
    %% (kprof_flame_trace:first_events/2): one inside a dirty NIF or waiting
    %% for the whole window would make none.
    States = kprof_flame_trace:start_states(maps:get(pids, Cfg)),
    Traced = [P || P <- maps:get(pids, Cfg), kprof_flame_trace:set_flags(P, Flags)],
    Busy = kprof_flame_trace:first_events([St || St = {P, _, _} <- States,
                                                  lists:member(P, Traced)],
                                           maps:get(tracer, Cfg)),
    _ = Busy > 0 andalso
        logger:warning("kprof flame: capture ~b: the sink's port was busy (a port tracer's "
                       "backlog): the state at the start of ~b of ~b process(es) is not in "
                       "the capture; their frames start at their first event",
                       [Id, Busy, length(Traced)]),
    Cap = maps:get(Id, Caps),
    Refs1 = lists:foldl(fun(P, R) -> maps:update_with(P, fun(N) -> N + 1 end, 1, R) end,
                        Refs, Traced),
    S#state{caps = Caps#{Id := Cap#cap{pids = Traced}}, refs = Refs1};
trace_pids(_Id, _Mode, _Cfg, _Flags, S) ->
    S.

%% keep_guard: the capture's files are still to be written, the guard stays
%% armed (watching no pattern: they are off) until done/1.
-spec do_close(integer(), keep_guard | disarm, #state{}) -> #state{}.
do_close(Id, Guard, S = #state{caps = Caps}) ->
    case maps:take(Id, Caps) of
        error ->
            S;
        {Cap, Rest} ->
            S0 = case Guard of
                     keep_guard ->
                         _ = try kprof_guard:watch_patterns({kprof_flame, Id}, [])
                             catch _:_ -> ok
                             end,
                         S#state{writing = maps:put(Id, {Cap#cap.owner, Cap#cap.mref},
                                                    S#state.writing)};
                     disarm ->
                         erlang:demonitor(Cap#cap.mref, [flush]),
                         disarm(Id),
                         S
                 end,
            kprof_flame_trace:untrigger(Cap#cap.trigger, Cap#cap.session),
            S1 = untrace_pids(Id, Cap, S0#state{caps = Rest}),
            case map_size(Rest) of
                0 ->
                    %% In a session, every process of the captures at once;
                    %% on the legacy API, the processes kprof traces, when a
                    %% capture joined processes as it ran; the NIF detached.
                    Legacy = kprof_trace_session:legacy(Cap#cap.session),
                    _ = (not Legacy orelse S1#state.dynamic)
                        andalso kprof_flame_trace:sweep(S1#state.session),
                    _ = Legacy andalso kprof_flame_trace:detach(Cap#cap.tracer),
                    keep_or_clear(S1#state{refs = #{}, dynamic = false});
                _ ->
                    S1
            end
    end.

%% The last capture closed: the call patterns stay for keep_patterns_ms when
%% web captures are allowed (a timer then clears them), else go now.
-spec keep_or_clear(#state{}) -> #state{}.
keep_or_clear(S = #state{patterns = Spec}) when Spec =/= none ->
    case kprof_web_gate:keep_patterns_ms() of
        0 ->
            clear_patterns(S);
        Ms ->
            S#state{keep = erlang:start_timer(Ms, self(), keep_patterns)}
    end;
keep_or_clear(S) ->
    %% The guard took them off already (an abort).
    clear_patterns(S).

%% A capture opens: the kept patterns are its (no timer clears them).
-spec cancel_keep(#state{}) -> #state{}.
cancel_keep(S = #state{keep = undefined}) ->
    S;
cancel_keep(S = #state{keep = Ref}) ->
    _ = erlang:cancel_timer(Ref, [{async, true}, {info, false}]),
    S#state{keep = undefined}.

%% The kept patterns cleared, when no capture has opened since.
-spec unkeep(#state{}) -> #state{}.
unkeep(S = #state{keep = undefined}) ->
    S;
unkeep(S = #state{caps = Caps}) when map_size(Caps) > 0 ->
    cancel_keep(S);
unkeep(S) ->
    clear_patterns(cancel_keep(S)).

%% Flags come off a process when no other open capture wants it, as far as
%% this server knows without asking the sink: pid mode counts its
%% processes, flame_apply's caller is its capture's. Processes that joined by
%% a trigger call or a spawn come off through close/1 (the sink lists those
%% in no other capture); once the last capture is closed, every process still
%% traced by kprof comes off (sweep_last/1), children spawned late included.
-spec untrace_pids(integer(), #cap{}, #state{}) -> #state{}.
untrace_pids(_Id, #cap{pids = Pids, session = Session}, S = #state{refs = Refs}) ->
    {Off, Refs1} = lists:foldl(fun(P, {Off0, R}) ->
                                       case maps:get(P, R, 0) of
                                           N when N =< 1 -> {[P | Off0], maps:remove(P, R)};
                                           N -> {Off0, R#{P := N - 1}}
                                       end
                               end, {[], Refs}, Pids),
    S1 = S#state{refs = Refs1},
    Keep = kept(S1),
    [untrace(P, Session) || P <- lists:usort(Off), not maps:is_key(P, Keep)],
    S1.

%% Processes other open captures need, as this server knows them.
-spec kept(#state{}) -> #{pid() => true}.
kept(#state{caps = Caps, refs = Refs}) ->
    Owners = [O || #cap{mode = apply, owner = O} <- maps:values(Caps)],
    maps:merge(maps:from_list([{P, true} || P <- Owners]), maps:map(fun(_, _) -> true end, Refs)).

%% (No session: in kprof's own nothing is left to take off; on the legacy
%% API the flags are the process's, whatever session kprof had.)
-spec untrace(pid(), kprof_trace_session:session() | undefined) -> boolean().
untrace(Pid, undefined) ->
    not kprof_trace_session:supported()
        andalso (try erlang:trace(Pid, false, kprof_flame_trace:all_flags())
                 catch error:badarg -> 0
                 end) =:= 1;
untrace(Pid, Session) ->
    kprof_flame_trace:trace(Session, Pid, false, kprof_flame_trace:all_flags()).

%% The call patterns off, with no capture open: the session with them.
-spec clear_patterns(#state{}) -> #state{}.
clear_patterns(S = #state{session = Session}) ->
    kprof_flame_trace:clear_patterns(Session),
    S#state{session = undefined, patterns = none}.

