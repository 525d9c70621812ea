%%% @doc What a flame capture sets in the VM, in its trace session
%%% ({@link kprof_trace_session}): the process flags, the call patterns every
%%% capture shares, a flame_capture trigger's meta pattern, and every way
%%% they come off. {@link kprof_flame_srv} decides when; this module makes
%%% the calls, the same on the legacy API (before OTP 27) and in a session
%%% of kprof's own.
%%%
%%% A capture's flags, as {@link kprof_flame_srv:open/3} gives them to its
%%% caller, carry the tracer and the session: `{tracer, ...}' and
%%% `{kprof_trace_session, Session}' (the weak handle: it does not keep the
%%% session alive) beside the flag atoms.
%%%
%%% A process traced from the middle of a capture's window says nothing
%%% until its next event, and a process that spends the whole window inside
%%% a dirty NIF or BIF (`erts_debug:dirty_io/2', a file read in the file
%%% server), or waiting, makes none: the capture had no event of it
%%% (`no_events' when it was the only one). {@link first_events/2} gives
%%% each process of flame_pid the event its state at the start would have
%%% made: `in' in the function it runs, or `out' in the one it waits in, so
%%% the window shows that frame (its time as the function's own, or as
%%% SLEEP under it) until the process's own events take over.
-module(kprof_flame_trace).

-export([flags/2, set_flags/2, clear_flags/2, session_of/1, flags_only/1, all_flags/0,
         traced_by_other/1, tracer_of/1, start_states/1, first_events/2]).
-export([set_patterns/2, clear_patterns/1, set_trigger/4, untrigger/2, trigger_ms/3,
         call_patterns/1, trace/4, sweep/1, detach/1, undo/1]).

-export_type([spec/0]).

%% Every process flag a capture may set, to clear them all.
-define(ALL_FLAGS, [call, arity, return_to, running, procs, garbage_collection,
                    set_on_spawn, monotonic_timestamp]).
-define(CALLER_MS, [{'_', [], [{message, {caller}}]}]).
%% The call patterns' match spec: none, or {caller} for a capture with callers => true.
-type spec() :: true | callers.

%%%%%%%%%%%%%%%%%%%%%%%
%%% PROCESS FLAGS   %%%
%%%%%%%%%%%%%%%%%%%%%%%

%% @doc The process flags of a capture with options `Cfg' and this tracer
%% (as {@link kprof_sink:tracer/0} gives it). The NIF takes its own
%% timestamps; a port is asked for the VM's.
-spec flags(map(), tuple()) -> [atom() | tuple()].
flags(Cfg, Tracer) ->
    [call, arity, return_to, running, procs, Tracer]
        ++ [monotonic_timestamp || tuple_size(Tracer) =:= 2]
        ++ [garbage_collection || maps:get(gc, Cfg)]
        ++ [set_on_spawn || maps:get(children, Cfg)].

%% @doc Every flag a capture may set.
-spec all_flags() -> [atom()].
all_flags() ->
    ?ALL_FLAGS.

%% @doc Sets a capture's `Flags' (as {@link kprof_flame_srv:open/3} gave
%% them) on `Pid', in the capture's trace session; `true' if it took them.
%% On the legacy API a process that still has a kprof tracer of an earlier
%% session (a generation of the NIF that is no longer live: it would drop
%% it at its next event) has it taken off first, since a process has one
%% tracer.
-spec set_flags(pid(), list()) -> boolean().
set_flags(Pid, Flags) ->
    Session = session_of(Flags),
    Want = case kprof_trace_session:tracer(Session) of
               {tracer, Port} -> Port;
               {tracer, M, St} -> {M, St}
           end,
    case kprof_trace_session:legacy(Session) andalso tracer_of(Pid) of
        {tracer, T} when T =/= [], T =/= Want ->
            case kprof_sessions:ours(T) of
                true -> trace(Session, Pid, false, ?ALL_FLAGS);
                false -> false
            end;
        _ ->
            ok
    end,
    trace(Session, Pid, true, Flags).

%% @doc Every flag a capture may have set comes off `Pid', in the session
%% of these `Flags' (as {@link kprof_flame_srv:open/3} gave them).
-spec clear_flags(pid(), list()) -> ok.
clear_flags(Pid, Flags) ->
    _ = trace(session_of(Flags), Pid, false, ?ALL_FLAGS),
    ok.

%% @doc The trace session of a capture's flags.
-spec session_of(list()) -> kprof_trace_session:session().
session_of(Flags) ->
    [Session] = [S || {kprof_trace_session, S} <- Flags],
    Session.

%% @doc A capture's flags without its tracer and its session.
-spec flags_only(list()) -> [atom()].
flags_only(Flags) ->
    [F || F <- Flags, not is_tuple(F)].

%% @doc Flags on or off a process (or `all'), in the session; `true' when
%% the VM took them for one process.
-spec trace(kprof_trace_session:session(), pid() | all, boolean(), list()) -> boolean().
trace(Session, Who, How, Flags) ->
    try kprof_trace_session:process(Session, Who, How, flags_only(Flags)) of
        1 -> true;
        _ -> false
    catch
        error:badarg -> false   % gone already, or the session destroyed
    end.

%% @doc Processes whose tracer is neither none nor kprof's: the VM would
%% refuse to trace them (`badarg', or "can only have one tracer per
%% process"). In a session of kprof's own (OTP 27+) there are none.
-spec traced_by_other([pid()]) -> [{pid(), term()}].
traced_by_other(Pids) ->
    case kprof_trace_session:supported() of
        true -> [];
        false -> [{P, T} || P <- Pids, {tracer, T} <- [tracer_of(P)], T =/= [],
                            not kprof_sessions:ours(T)]
    end.

%% @doc erlang:trace_info(P, tracer), or `undefined' when it raises (as for
%% a process that is gone: nothing to read).
-spec tracer_of(pid()) -> {tracer, term()} | undefined.
tracer_of(P) ->
    try erlang:trace_info(P, tracer) catch _:_ -> undefined end.

%% @doc The states of `Pids' just before their flags are set, as the event
%% each stands for: `in' in the function a running (or runnable) process
%% is in, `out' in the one a waiting process waits in.
-spec start_states([pid()]) -> [{pid(), in | out, mfa()}].
start_states(Pids) ->
    [{P, Kind, MFA} || P <- Pids,
                       [{status, St}, {current_function, {_, _, _} = MFA}]
                           <- [erlang:process_info(P, [status, current_function])],
                       Kind <- [kind_of(St)], Kind =/= none].

%% @doc Once the flags are set, the events of {@link start_states/1} written
%% where the tracer's events go. A process whose own events came first is
%% left as they say by the sink (an `in' infers a frame only for a process
%% with no stack yet). Returns how many were not written because the sink's
%% port was busy: the caller says so.
-spec first_events([{pid(), in | out, mfa()}], tuple()) -> non_neg_integer().
first_events(States, Tracer) ->
    length([P || {P, Kind, MFA} <- States, write_event(Tracer, P, Kind, MFA) =:= busy]).

-spec kind_of(atom()) -> in | out | none.
kind_of(running) -> in;
kind_of(runnable) -> in;
kind_of(garbage_collecting) -> in;
kind_of(waiting) -> out;
kind_of(_) -> none.

%% As the VM would write it: through the NIF into the ring (its trace/5,
%% called here, takes the time itself), or as a trace message to the port.
%% Never waits for the port: a port tracer's backlog keeps the port busy,
%% and a plain port_command/2 would suspend the flame server (the caller)
%% until the VM had worked through it, minutes under load. The VM's own
%% trace messages do not wait for a busy port; this one is left out.
-spec write_event(tuple(), pid(), in | out, mfa()) -> ok | busy.
write_event({tracer, kprof_tracer, Gen}, P, Kind, MFA) ->
    _ = try kprof_tracer:trace(Kind, Gen, P, MFA, #{}) catch error:_ -> ok end,
    ok;
write_event({tracer, Port}, P, Kind, MFA) ->
    Msg = {trace_ts, P, Kind, MFA, erlang:monotonic_time(nanosecond)},
    try erlang:port_command(Port, term_to_binary(Msg), [nosuspend]) of
        true -> ok;
        false -> busy
    catch
        error:_ -> ok
    end.

%%%%%%%%%%%%%%%%
%%% PATTERNS %%%
%%%%%%%%%%%%%%%%

%% @doc The call patterns in the session, `on_load' first: a module loaded
%% while `'_'' is being set gets them from it.
-spec set_patterns(spec(), kprof_trace_session:session()) -> ok.
set_patterns(Spec, Session) ->
    _ = [kprof_trace_session:function(Session, What, MS, Flags)
         || {What, MS, Flags} <- call_patterns(Spec)],
    ok.

%% @doc The call patterns off, with no capture open: the session destroyed
%% (all of it goes) and the NIF detached; on the legacy API `on_load' comes
%% off first, then `'_'': the other way round, a module loaded between the
%% two (kprof:stop() mid-capture loads logger's and OTP's modules) kept the
%% pattern `on_load' gave it.
-spec clear_patterns(kprof_trace_session:session() | undefined) -> ok.
clear_patterns(Session) ->
    case kprof_trace_session:supported() of
        true when Session =/= undefined ->
            kprof_trace_session:close(Session),
            detach(kprof_trace_session:tracer(Session));
        true ->
            ok;
        false ->
            _ = erlang:trace_pattern(on_load, false, [local]),
            _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
            ok
    end.

%% @doc The trigger's meta pattern turns the calling process's flags on, and
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
%%
%% The meta tracer is the session's (kprof_trace_session: on the legacy API
%% `{meta, kprof_tracer, {meta, Gen}}' or `{meta, Port}', and the match
%% spec's `trace' action names the tracer; in a session both are the
%% session's own).
-spec set_trigger(mfa() | undefined, integer(), map(), kprof_trace_session:session()) ->
          ok | {error, term()}.
set_trigger(undefined, _Id, _Cfg, _Session) ->
    ok;
set_trigger(MFA, Id, Cfg, Session) ->
    try kprof_trace_session:function(Session, MFA, trigger_ms(Id, Cfg, Session), [meta]) of
        0 -> {error, {no_such_function, MFA}};
        _ -> ok
    catch
        error:Reason -> {error, {trace_pattern, Reason}}
    end.

%% @doc A trigger's meta pattern off (the function may be gone, the session
%% destroyed: nothing to take off then).
-spec untrigger(mfa() | undefined, kprof_trace_session:session()) -> ok.
untrigger(undefined, _Session) ->
    ok;
untrigger(MFA, Session) ->
    _ = try kprof_trace_session:function(Session, MFA, false, [meta]) catch error:_ -> 0 end,
    ok.

%% @doc The trigger's match spec.
-spec trigger_ms(integer(), map(), kprof_trace_session:session()) -> [tuple()].
trigger_ms(Id, Cfg, Session) ->
    Flags = flags_only(flags(Cfg, kprof_trace_session:tracer(Session)))
        ++ kprof_trace_session:trace_action(Session),
    [{'_', [], [{trace, [], Flags},
                {message, {{[], {caller}, {{kprof_flame, Id}}}}},
                {return_trace}, {exception_trace}]}].

%% @doc The call patterns every capture shares, as the guard holds them:
%% modules loaded later and every function, in the order they are set and
%% cleared in (the guard clears both on an abort).
-spec call_patterns(none | spec()) -> [{{'_', '_', '_'} | on_load, true | list(), [local]}].
call_patterns(none) ->
    [];
call_patterns(Spec) ->
    MS = case Spec of
             callers -> ?CALLER_MS;
             true -> true
         end,
    [{on_load, MS, [local]}, {{'_', '_', '_'}, MS, [local]}].

%%%%%%%%%%%%%%%%%
%%% CLEANING %%%
%%%%%%%%%%%%%%%%%

%% @doc Every flag of the captures off: in kprof's session, every process
%% and `new' at once; on the legacy API, every process kprof traces (a
%% child spawned after its capture's members were listed, say).
-spec sweep(kprof_trace_session:session() | undefined) -> ok.
sweep(Session) ->
    case kprof_trace_session:supported() of
        true when Session =:= undefined -> ok;
        true -> _ = trace(Session, all, false, ?ALL_FLAGS), ok;
        false -> sweep_legacy()
    end.

%% @doc What a killed flame server left, as its record says: the triggers'
%% meta patterns, the call patterns, the flags. (Its trace session went with
%% it: the VM destroys a session whose handle nobody holds; destroyed here
%% by name all the same.)
-spec undo([mfa()]) -> ok.
undo(Triggers) ->
    case kprof_trace_session:supported() of
        true ->
            kprof_trace_session:destroy(kprof_flame);
        false ->
            _ = [try erlang:trace_pattern(T, false, [meta]) catch _:_ -> 0 end
                 || T <- Triggers],
            clear_patterns(undefined),
            sweep_legacy()
    end,
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
    ok.

%% @doc The NIF writes no more for any process that kept its flags (it drops
%% them at its next event); nothing for the port tracer.
-spec detach(tuple()) -> ok.
detach({tracer, kprof_tracer, _Gen}) -> _ = try kprof_tracer:detach() catch _:_ -> ok end, ok;
detach(_PortTracer) -> ok.

-spec sweep_legacy() -> ok.
sweep_legacy() ->
    Ours = fun kprof_sessions:ours/1,
    _ = kprof_trace_session:untrace_each(
          fun(P) -> kprof_trace_session:traced_by(P, Ours) andalso has_our_flags(P) end,
          ?ALL_FLAGS),
    ok.

-spec has_our_flags(pid()) -> boolean().
has_our_flags(P) ->
    case erlang:trace_info(P, flags) of
        {flags, Fs} -> lists:member(call, Fs) andalso lists:member(return_to, Fs);
        _ -> false
    end.
