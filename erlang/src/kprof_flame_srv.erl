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
%%% sink builds stacks from calls and return_tos, port/flame/flame_stack.c), or
%%% `[{'_', [], [{message, {caller}}]}]' while a capture with `callers =>
%%% true' is open (every call's caller: the BEAM's own stacks, at a higher
%%% cost per call). Processes traced by two captures
%%% keep their flags until both are done. A flame_capture trigger has a
%%% meta pattern of its own; one capture per trigger function at a time.
%%%
%%% The tracer is the one {@link kprof_sink:tracer/0} gives: by default the
%%% `kprof_tracer' NIF, whose events go through the sink's ring, or the
%%% sink's port (application env `{tracer, port}'). A trigger's meta pattern
%%% has the matching meta tracer (`{meta, kprof_tracer, {meta, Gen}}' or
%%% `{meta, Port}'). When the last capture closes, the NIF is detached: a
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
%%% A process has one tracer (before OTP 27): a capture of processes that
%%% another tracer (dbg, recon_trace, the tracer NIF of kprof's tiers) has
%%% already is refused with `{error, {traced_by_other, Pid, Tracer}}' and a
%%% warning that says which, rather than tracing nothing and looking idle.
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

%% PUBLIC (for the captures: kprof_flame, kprof_flame_run, kprof_flame_calib)
-export([open/3, close/1, done/1, stop_trigger/1, flags/2, untrace_flags/0, set_flags/2,
         release_patterns/0]).
%% PUBLIC (for kprof:cancel/0)
-export([cancel/0]).
%% Internal: the sink's start options, for their test.
-export([start_opts/2]).
%% gen_server callbacks
-export([start_link/0, init/1, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2, code_change/3]).

-define(SERVER, ?MODULE).
-define(CALL_TIMEOUT, 60000).
%% Every process flag a capture may set, to clear them all.
-define(ALL_FLAGS, [call, arity, return_to, running, procs, garbage_collection,
                    set_on_spawn, monotonic_timestamp]).
-define(CALLER_MS, [{'_', [], [{message, {caller}}]}]).
%% The call patterns' match spec: none, or {caller} for a capture with callers => true.
-type spec() :: true | callers.

-record(cap, {owner :: pid(),
              mref :: reference(),
              mode :: apply | pid | capture,
              pids = [] :: [pid()],              % traced by this server (pid mode)
              trigger :: mfa() | undefined,
              children = false :: boolean(),
              callers = false :: boolean(),
              tracer :: tuple()}).

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
                keep :: reference() | undefined}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Register capture `Id' of the caller with the sink and set up the
%% VM for it. `Cfg' holds the validated options, and `pids' and `hide'
%% (apply: the caller's wrapping frame, left out of the stacks), `pids'
%% (pid), or `trigger' and `ncalls' (capture). Returns the trace flags of the
%% capture (its tracer among them) for the caller to set on itself
%% (flame_apply). A process of `pids' that has a tracer other than kprof's
%% gives `{error, {traced_by_other, Pid, Tracer}}' and a warning; nothing
%% is set up. From OTP 27, `gc => true' while another trace session traces
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
    case traced_by_other(maps:get(pids, Cfg, [])) of
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

%% @doc The process flags of a capture with options `Cfg' and this tracer
%% (as {@link kprof_sink:tracer/0} gives it). The NIF takes its own
%% timestamps; a port is asked for the VM's.
-spec flags(map(), tuple()) -> [atom() | tuple()].
flags(Cfg, Tracer) ->
    [call, arity, return_to, running, procs, Tracer]
        ++ [monotonic_timestamp || tuple_size(Tracer) =:= 2]
        ++ [garbage_collection || maps:get(gc, Cfg)]
        ++ [set_on_spawn || maps:get(children, Cfg)].

%% @doc Sets a capture's `Flags' on `Pid'; `true' if it took them. A process
%% that still has a kprof tracer of an earlier session (a generation of the
%% NIF that is no longer live: it would drop it at its next event) has it
%% taken off first, since a process has one tracer.
-spec set_flags(pid(), list()) -> boolean().
set_flags(Pid, Flags) ->
    [Tracer] = [T || T <- Flags, is_tuple(T), element(1, T) =:= tracer],
    Want = case Tracer of
               {tracer, Port} -> Port;
               {tracer, M, St} -> {M, St}
           end,
    case tracer_of(Pid) of
        {tracer, T} when T =/= [], T =/= Want ->
            case kprof_sessions:ours(T) of
                true -> trace(Pid, false, ?ALL_FLAGS);
                false -> false
            end;
        _ ->
            ok
    end,
    trace(Pid, true, Flags).

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

%% @doc Every flag a capture may have set.
-spec untrace_flags() -> [atom()].
untrace_flags() ->
    ?ALL_FLAGS.

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
            clear_patterns();
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
    _ = [try erlang:trace_pattern(T, false, [meta]) catch _:_ -> 0 end
         || #{trigger := T} <- maps:values(Caps), T =/= undefined],
    clear_patterns(),
    sweep(),
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
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
        {error, _} = Error -> {reply, Error, S}
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
    _ = [untrace(P) || P <- Pids, not maps:is_key(P, Keep)],
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
        #{Id := #cap{trigger = MFA}} when MFA =/= undefined ->
            %% The guard first, or it would take the pattern for one a code
            %% reload dropped and put it back.
            _ = try kprof_guard:watch_patterns({kprof_flame, Id},
                                               call_patterns(S#state.patterns))
                catch _:_ -> ok
                end,
            _ = erlang:trace_pattern(MFA, false, [meta]),
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
    _ = map_size(Caps) > 0 andalso sweep(),
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

info_({guard_abort, Id, _Kind}, S = #state{caps = Caps}) ->
    %% The guard took the flags off and the '_' pattern; the rest is ours.
    _ = case Caps of
        #{Id := #cap{trigger = MFA}} when MFA =/= undefined ->
            _ = erlang:trace_pattern(MFA, false, [meta]);
        _ ->
            ok
    end,
    _ = erlang:trace_pattern(on_load, false, [local]),
    {noreply, S#state{patterns = none}};
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

-spec call(term()) -> term().
call(Request) ->
    try
        gen_server:call(?SERVER, Request, ?CALL_TIMEOUT)
    catch
        exit:{noproc, _} -> {error, not_running};
        exit:{timeout, _} -> {error, timeout};
        exit:{Reason, _} -> {error, {not_running, Reason}}
    end.

%% The VM's part of a capture: nothing here waits for the sink (the caller
%% did that in open_in_sink/3, and tells the sink flame_arm after this).
-spec do_open(integer(), apply | pid | capture, map(), pid(), #state{}) ->
          {ok, list(), #state{}} | {error, term()}.
do_open(Id, Mode, Cfg, Owner, S0) ->
    S = #state{caps = Caps} = cancel_keep(S0),
    Tracer = maps:get(tracer, Cfg),
    Trigger = maps:get(trigger, Cfg, undefined),
    Callers = maps:get(callers, Cfg, false),
    %% {caller} while any open capture wants it; never taken away from one
    %% (patterns kept with no capture open are nobody's).
    Spec = case Callers orelse (S#state.patterns =:= callers andalso map_size(Caps) > 0) of
               true -> callers;
               false -> true
           end,
    %% The trigger before the call patterns (see set_trigger/3).
    case set_trigger(Trigger, Id, Cfg) of
        ok ->
            Spec =/= S#state.patterns andalso set_patterns(Spec),
            Cap = #cap{owner = Owner, mref = erlang:monitor(process, Owner),
                       mode = Mode, trigger = Trigger, callers = Callers,
                       children = maps:get(children, Cfg), tracer = Tracer},
            arm_guard(Id, Owner, Cfg, maps:get(events0, Cfg, undefined), Spec),
            S1 = S#state{caps = Caps#{Id => Cap}, patterns = Spec,
                         dynamic = S#state.dynamic orelse Mode =:= capture
                             orelse maps:get(children, Cfg)},
            {ok, flags(Cfg, Tracer), trace_pids(Id, Mode, Cfg, S1)};
        {error, _} = Error ->
            Error
    end.

%% Processes whose tracer is neither none nor kprof's: the VM would refuse
%% to trace them (`badarg', or "can only have one tracer per process").
-spec traced_by_other([pid()]) -> [{pid(), term()}].
traced_by_other(Pids) ->
    [{P, T} || P <- Pids, {tracer, T} <- [tracer_of(P)], T =/= [], not kprof_sessions:ours(T)].

%% erlang:trace_info(P, tracer), or `undefined' when it raises (as for a
%% process that is gone: nothing to read).
-spec tracer_of(pid()) -> {tracer, term()} | undefined.
tracer_of(P) ->
    try erlang:trace_info(P, tracer) catch _:_ -> undefined end.

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

-spec set_patterns(spec()) -> ok.
set_patterns(Spec) ->
    _ = [erlang:trace_pattern(What, MS, Flags) || {What, MS, Flags} <- call_patterns(Spec)],
    ok.

-spec clear_patterns() -> ok.
clear_patterns() ->
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    _ = erlang:trace_pattern(on_load, false, [local]),
    ok.

%% The trigger's meta pattern turns the calling process's flags on, and
%% names the capture in the call's message: {[], Caller, {kprof_flame, Id}}.
%% (A seq_trace label would do too, but asking for the token in the same
%% match spec as setting it crashed OTP 25 under GC; the payload is enough.)
%%
%% Checked on OTP 25: a process whose call of the trigger runs this match
%% spec while the meta pattern is being installed and local call patterns
%% exist already loses the flags the match spec gave it a little later,
%% and may make no event at all on its next calls. Installed before the
%% call patterns it does not. So the first capture sets the trigger first,
%% then the call patterns, then tells the sink (flame_arm) to take trigger
%% calls: calls before that are counted as `calls_early', not traced. A
%% capture starting while another one runs has the call patterns in place
%% already; its trigger calls during the install may be lost (doc/internals-flame.md).
-spec set_trigger(mfa() | undefined, integer(), map()) -> ok | {error, term()}.
set_trigger(undefined, _Id, _Cfg) ->
    ok;
set_trigger(MFA, Id, Cfg) ->
    Tracer = maps:get(tracer, Cfg),
    try erlang:trace_pattern(MFA, trigger_ms(Id, Cfg, Tracer), [meta_tracer(Tracer)]) of
        0 -> {error, {no_such_function, MFA}};
        _ -> ok
    catch
        error:Reason -> {error, {trace_pattern, Reason}}
    end.

%% The meta tracer that goes with a capture's tracer: the NIF tells a meta
%% event by its state (checked on OTP 25: trace_pattern/3 takes
%% `{meta, Module, State}', and the match spec's `trace' action takes
%% `{{tracer, Module, State}}' as it takes `{{tracer, Port}}').
-spec meta_tracer(tuple()) -> tuple().
meta_tracer({tracer, Port}) -> {meta, Port};
meta_tracer({tracer, kprof_tracer, Gen}) -> {meta, kprof_tracer, {meta, Gen}}.

-spec trigger_ms(integer(), map(), tuple()) -> [tuple()].
trigger_ms(Id, Cfg, Tracer) ->
    Flags = [F || F <- flags(Cfg, Tracer), not is_tuple(F)] ++ [{Tracer}],
    [{'_', [], [{trace, [], Flags},
                {message, {{[], {caller}, {{kprof_flame, Id}}}}},
                {return_trace}, {exception_trace}]}].

%% The call patterns every capture shares, as the guard holds them: every
%% function, and modules loaded later (the guard clears both on an abort).
-spec call_patterns(none | spec()) -> [{{'_', '_', '_'} | on_load, true | list(), [local]}].
call_patterns(none) ->
    [];
call_patterns(Spec) ->
    MS = case Spec of
             callers -> ?CALLER_MS;
             true -> true
         end,
    [{{'_', '_', '_'}, MS, [local]}, {on_load, MS, [local]}].

%% The guard's abort runs in the guard: it only sends messages. The trigger's
%% meta pattern is the guard's to watch too: a code reload of its module
%% drops it (the shared `'_'' pattern stands for every module, which the
%% guard does not check one by one; `on_load' covers reloaded modules).
-spec arm_guard(integer(), pid(), map(), non_neg_integer() | undefined, spec()) -> ok.
arm_guard(Id, Owner, Cfg, E0, Spec) ->
    Srv = self(),
    Abort = fun(Kind, _Info) ->
                    Srv ! {guard_abort, Id, Kind},
                    Owner ! {kprof_flame_aborted, Id, Kind}
            end,
    Trigger = case maps:get(trigger, Cfg, undefined) of
                  undefined -> [];
                  MFA -> Tracer = maps:get(tracer, Cfg),
                         [{MFA, trigger_ms(Id, Cfg, Tracer), [meta_tracer(Tracer)]}]
              end,
    Arm0 = #{abort => Abort, owner => Srv,
             patterns => call_patterns(Spec) ++ Trigger},
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

-spec trace_pids(integer(), apply | pid | capture, map(), #state{}) -> #state{}.
trace_pids(Id, pid, Cfg, S = #state{caps = Caps, refs = Refs}) ->
    Flags = flags(Cfg, maps:get(tracer, Cfg)),
    Traced = [P || P <- maps:get(pids, Cfg), set_flags(P, Flags)],
    Cap = maps:get(Id, Caps),
    Refs1 = lists:foldl(fun(P, R) -> maps:update_with(P, fun(N) -> N + 1 end, 1, R) end,
                        Refs, Traced),
    S#state{caps = Caps#{Id := Cap#cap{pids = Traced}}, refs = Refs1};
trace_pids(_Id, _Mode, _Cfg, S) ->
    S.

-spec trace(pid(), boolean(), list()) -> boolean().
trace(Pid, How, Flags) ->
    try erlang:trace(Pid, How, Flags) of
        1 -> true;
        _ -> false
    catch
        error:badarg -> false   % gone already
    end.

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
            Cap#cap.trigger =/= undefined
                andalso erlang:trace_pattern(Cap#cap.trigger, false, [meta]),
            S1 = untrace_pids(Id, Cap, S0#state{caps = Rest}),
            case map_size(Rest) of
                0 ->
                    _ = S1#state.dynamic andalso sweep(),
                    detach(Cap#cap.tracer),
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
            clear_patterns(),
            S#state{patterns = none};
        Ms ->
            S#state{keep = erlang:start_timer(Ms, self(), keep_patterns)}
    end;
keep_or_clear(S) ->
    %% The guard took them off already (an abort).
    clear_patterns(),
    S.

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
    clear_patterns(),
    (cancel_keep(S))#state{patterns = none}.

%% Flags come off a process when no other open capture wants it, as far as
%% this server knows without asking the sink: pid mode counts its
%% processes, flame_apply's caller is its capture's. Processes that joined by
%% a trigger call or a spawn come off through close/1 (the sink lists those
%% in no other capture); once the last capture is closed, every process still
%% traced by kprof comes off (sweep/0), children spawned late included.
-spec untrace_pids(integer(), #cap{}, #state{}) -> #state{}.
untrace_pids(_Id, #cap{pids = Pids}, S = #state{refs = Refs}) ->
    {Off, Refs1} = lists:foldl(fun(P, {Off0, R}) ->
                                       case maps:get(P, R, 0) of
                                           N when N =< 1 -> {[P | Off0], maps:remove(P, R)};
                                           N -> {Off0, R#{P := N - 1}}
                                       end
                               end, {[], Refs}, Pids),
    S1 = S#state{refs = Refs1},
    Keep = kept(S1),
    [untrace(P) || P <- lists:usort(Off), not maps:is_key(P, Keep)],
    S1.

%% Processes other open captures need, as this server knows them.
-spec kept(#state{}) -> #{pid() => true}.
kept(#state{caps = Caps, refs = Refs}) ->
    Owners = [O || #cap{mode = apply, owner = O} <- maps:values(Caps)],
    maps:merge(maps:from_list([{P, true} || P <- Owners]), maps:map(fun(_, _) -> true end, Refs)).

-spec untrace(pid()) -> boolean().
untrace(Pid) ->
    trace(Pid, false, ?ALL_FLAGS).

%% The last capture closed: the NIF writes no more for any process that
%% kept its flags (it drops them at its next event).
-spec detach(tuple()) -> ok.
detach({tracer, kprof_tracer, _Gen}) -> _ = try kprof_tracer:detach() catch _:_ -> ok end, ok;
detach(_PortTracer) -> ok.

%% No capture is open: any process still traced by kprof for flame (a
%% child spawned after its capture's members were listed, say) comes off.
-spec sweep() -> ok.
sweep() ->
    _ = [untrace(P) || P <- erlang:processes(), traced_by_us(P), has_our_flags(P)],
    ok.

-spec traced_by_us(pid()) -> boolean().
traced_by_us(P) ->
    case tracer_of(P) of
        {tracer, []} -> false;
        {tracer, T} -> kprof_sessions:ours(T);
        _ -> false
    end.

-spec has_our_flags(pid()) -> boolean().
has_our_flags(P) ->
    case erlang:trace_info(P, flags) of
        {flags, Fs} -> lists:member(call, Fs) andalso lists:member(return_to, Fs);
        _ -> false
    end.
