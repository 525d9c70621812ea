%%% @doc Where kprof traces: a trace session of its own (OTP 27 and later),
%%% or the one session older OTPs have.
%%%
%%% From OTP 27 the VM keeps trace sessions apart (the `trace' module): each
%%% has its own tracer, its own flags on each process and its own patterns,
%%% and destroying a session (the module's `session_destroy') takes all of
%%% them off at once. Each of
%%% kprof's modes traces in a session of its own, named for the mode
%%% (`kprof_tiers', `kprof_flame', `kprof_calls'), with kprof's tracer (the
%%% `kprof_tracer' NIF as the tracer module, `{kprof_tracer, Gen}', or the
%%% sink's port when `tracer => port'). So kprof runs beside dbg, tprof, a
%%% recon_trace-style tracer of the legacy API (`erlang:trace/3') or any
%%% other session on the same processes and functions: each gets its own
%%% events, and kprof's end (a stop, an abort, its owner's death) takes off
%%% kprof's settings and nothing else.
%%%
%%% Before OTP 27 there is one session: a process has one tracer, and kprof
%%% traces with `erlang:trace/3' and `erlang:trace_pattern/3' as before
%%% (`legacy' below). One code path serves both: the modes call this
%%% module, which asks the VM once whether it has sessions ({@link
%%% kprof_sessions:supported/0}, a capability check, no version string) and
%%% does what that VM needs:
%%%
%%% <ul>
%%% <li>{@link process/4} and {@link function/4} take flags and patterns
%%%     without a tracer (a `{tracer, ...}' in the flags is the session's
%%%     own and left out); on the legacy API the tracer is added, and a
%%%     `meta' pattern gets the matching meta tracer (`{meta, Port}', or
%%%     `{meta, kprof_tracer, {meta, Gen}}');</li>
%%% <li>a match spec's `{trace, Disable, Enable}' sets flags in the session
%%%     of its pattern, and takes no tracer there (one given makes the action
%%%     fail): {@link trace_action/1} is what the enable list needs;</li>
%%% <li>a meta pattern's events come to the session's tracer: the NIF tells
%%%     them by the `timestamp => timestamp' the VM gives every meta event
%%%     (a meta tracer's flags are fixed to `[call, timestamp]'; kprof's own
%%%     flags never ask for `timestamp'), where the legacy API gives them
%%%     the `{meta, Gen}' state;</li>
%%% <li>{@link close/1} destroys the session; {@link destroy/1} and {@link
%%%     destroy_all/0} destroy kprof's sessions by name, for the guard and
%%%     for a server restarted after its predecessor was killed.</li>
%%% </ul>
%%%
%%% A session lives while its handle does: the process that opened it (the
%%% mode's owner) holds it, and the VM destroys a session whose handle is
%%% garbage collected, so an owner killed takes its session with it. Other
%%% processes get {@link weak/1}, which reaches the same session without
%%% keeping it alive.
%%%
%%% What sessions do not keep apart: seq_trace tokens are the process's, not
%%% a session's (the tiers' request labels are seen by every session's
%%% `is_seq_trace' match specs, and another tool's token makes kprof's tier
%%% patterns match); `erlang:trace_delivered/1' waits for every session;
%%% two sessions tracing garbage collection on one process crash OTP 27 to
%%% 29 (kprof_sessions: kprof refuses `gc => true' then).
-module(kprof_trace_session).

%% PUBLIC
-export([supported/0, open/2, close/1, alive/1, weak/1, tracer/1, legacy/1,
         legacy_api/0, process/4, function/4, info/3, trace_action/1, untrace_each/2,
         traced_by/2, delivered/2]).
%% Every session of kprof's, by name (the guard, restarted servers)
-export([destroy/1, destroy_all/0]).

-export_type([session/0, name/0, tracer/0]).

-define(NAMES, [kprof_tiers, kprof_flame, kprof_calls]).
%% The `trace' module, by a name xref and dialyzer do not follow (before
%% OTP 27 there is none; kprof_sessions does the same).
-define(TRACE, (trace_mod())).

-type name() :: kprof_tiers | kprof_flame | kprof_calls.
%% kprof's tracer, as kprof_sink:tracer/0 gives it.
-type tracer() :: {tracer, port()} | {tracer, kprof_tracer, pos_integer()}.
%% `legacy': `erlang:trace/3' and its tracer. `session': the mode's name,
%% the VM's handle, the weak one of session_info/1 (or the handle again, when
%% it could not be told) and the tracer.
-opaque session() :: {legacy, tracer() | none} | {session, name(), term(), term(), tracer()}.

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Whether kprof traces in sessions of its own (the VM has them).
-spec supported() -> boolean().
supported() ->
    kprof_sessions:supported().

%% @doc A session for mode `Name' with this tracer. (Another of the same
%% name may be there: a second start of a mode that will be refused as busy
%% creates its own, and closes it.) On the legacy API there is nothing to
%% create. `{error, {session_create, Why}}' when the VM refuses.
-spec open(name(), tracer()) -> {ok, session()} | {error, term()}.
open(Name, Tracer) when Name =:= kprof_tiers; Name =:= kprof_flame; Name =:= kprof_calls ->
    case supported() of
        false ->
            {ok, {legacy, Tracer}};
        true ->
            Before = all_sessions(),
            try ?TRACE:session_create(Name, vm_tracer(Tracer), []) of
                Handle ->
                    %% Its weak handle: the one of its name that is new.
                    Weak = case [W || W = {N, _} <- all_sessions() -- Before, N =:= Name] of
                               [W] -> W;
                               _ -> Handle
                           end,
                    {ok, {session, Name, Handle, Weak, Tracer}}
            catch
                error:Why -> {error, {session_create, Why}}
            end
    end.

%% @doc Everything the session set comes off (flags, patterns, meta
%% patterns, `call_time'). The legacy API has no such call: its callers
%% take their settings off themselves.
-spec close(session()) -> ok.
close({legacy, _Tracer}) ->
    ok;
close({session, _Name, Handle, _Weak, _Tracer}) ->
    _ = try ?TRACE:session_destroy(Handle) catch error:_ -> false end,
    ok.

%% @doc Whether the session is still there (the guard may have destroyed
%% it); the legacy API's always is.
-spec alive(session()) -> boolean().
alive({legacy, _Tracer}) ->
    true;
alive({session, _Name, Handle, _Weak, _Tracer}) ->
    try ?TRACE:info(Handle, new, flags) of
        _ -> true
    catch
        error:badarg -> false
    end.

%% @doc The same session, without keeping it alive: for other processes
%% (the guard) and for records that outlive the owner.
-spec weak(session()) -> session().
weak(S = {legacy, _}) ->
    S;
weak({session, Name, _Handle, Weak, Tracer}) ->
    {session, Name, Weak, Weak, Tracer}.

%% @doc The legacy API with no tracer of kprof's: for patterns a caller set
%% with `erlang:trace_pattern/3' itself (a `meta' flag then needs its
%% tracer, `{meta, Tracer}', written out). Not for process/4 with `true'.
-spec legacy_api() -> session().
legacy_api() ->
    {legacy, none}.

%% @doc The tracer of the session.
-spec tracer(session()) -> tracer() | none.
tracer({legacy, Tracer}) -> Tracer;
tracer({session, _Name, _Handle, _Weak, Tracer}) -> Tracer.

%% @doc Whether this is the legacy API (one tracer per process).
-spec legacy(session()) -> boolean().
legacy({legacy, _}) -> true;
legacy({session, _, _, _, _}) -> false.

%% @doc `erlang:trace/3' in the session: `Who' is a pid, `all', `new' or
%% `existing' (legacy `all' is processes and ports; a session's is
%% processes). A `{tracer, ...}' in `Flags' is left out; on the legacy API
%% the session's tracer is added when turning flags on. Raises what the VM
%% raises (`badarg' for a process gone, or a session destroyed).
-spec process(session(), pid() | all | new | existing, boolean(), list()) -> non_neg_integer().
process({legacy, Tracer}, Who, true, Flags) ->
    erlang:trace(Who, true, [Tracer | plain(Flags)]);
process({legacy, _Tracer}, all, false, Flags) ->
    Plain = plain(Flags),
    untrace_each(fun(P) -> traced_by(P, fun(_) -> true end) end, Plain)
        + erlang:trace(ports, false, Plain) + erlang:trace(new, false, Plain);
process({legacy, _Tracer}, Who, false, Flags) ->
    erlang:trace(Who, false, plain(Flags));
process({session, _Name, Handle, _Weak, _Tracer}, Who, How, Flags) ->
    ?TRACE:process(Handle, Who, How, plain(Flags)).

%% @doc `Flags' off, on the legacy API, on every process `Which' accepts,
%% one process at a time (the legacy `process(_, all, false, _)' adds ports
%% and new ones). Not `erlang:trace(all, false, Flags)': it changes the
%% processes' tracers while the dirty schedulers run on, and OTP 25.2
%% crashes when a dirty scheduler schedules in a process whose tracer went
%% meanwhile (in `lookup_tracer_nif', issue 6448 in OTP's tracker; the
%% `all' path, pull request 8286). A single process is changed only while
%% it does not run, dirty included.
-spec untrace_each(fun((pid()) -> boolean()), list()) -> non_neg_integer().
untrace_each(Which, Flags) ->
    Off = fun(P) -> try erlang:trace(P, false, Flags) catch error:badarg -> 0 end end,
    lists:sum([Off(P) || P <- erlang:processes(), Which(P)]).

%% @doc Whether `P' has a tracer (as `erlang:trace_info(P, tracer)' gives
%% it) that `Ours' accepts.
-spec traced_by(pid(), fun((term()) -> boolean())) -> boolean().
traced_by(P, Ours) ->
    case erlang:trace_info(P, tracer) of
        {tracer, []} -> false;
        {tracer, T} -> Ours(T);
        undefined -> false
    end.

%% @doc `erlang:trace_pattern/3' in the session. `meta' in `Flags' is a meta
%% pattern whose tracer is the session's.
-spec function(session(), {atom(), atom(), arity() | '_'} | on_load, term(), list()) ->
          non_neg_integer().
function({legacy, Tracer}, MFA, MS, Flags) ->
    erlang:trace_pattern(MFA, MS, [legacy_flag(F, Tracer) || F <- Flags]);
function({session, _Name, Handle, _Weak, _Tracer}, MFA, MS, Flags) ->
    ?TRACE:function(Handle, MFA, MS, [session_flag(F) || F <- Flags]).

%% @doc `erlang:trace_info/2' in the session.
-spec info(session(), term(), atom()) -> term().
info({legacy, _Tracer}, What, Item) ->
    erlang:trace_info(What, Item);
info({session, _Name, Handle, _Weak, _Tracer}, What, Item) ->
    ?TRACE:info(Handle, What, Item).

%% @doc What a match spec's `{trace, Disable, Enable}' adds to `Enable' so
%% that the flags it sets go to this session's tracer: the tracer on the
%% legacy API, nothing in a session (the flags land in the pattern's own).
-spec trace_action(session()) -> list().
trace_action({legacy, Tracer}) -> [{Tracer}];
trace_action({session, _, _, _, _}) -> [].

%% @doc Destroys every session named `Name' (kprof's mode of that name),
%% whoever holds its handle. Nothing on the legacy API.
-spec destroy(name()) -> ok.
destroy(Name) ->
    _ = [try ?TRACE:session_destroy(W) catch error:_ -> false end
         || W = {N, _} <- all_sessions(), N =:= Name],
    ok.

%% @doc Destroys every session of kprof's.
-spec destroy_all() -> ok.
destroy_all() ->
    lists:foreach(fun destroy/1, ?NAMES).

%% @doc Waits until the VM has handed every trace message made so far to
%% its tracer (a port's queue, the NIF's ring): `ok'; or `timeout' after Ms.
%% The VM answers once each scheduler has come round to it, which a port
%% working through a backlog of trace messages can hold off for seconds. A
%% timeout is logged as a warning, naming `Who': what it reads next may lack
%% the last events. A process of its own waits, so that the VM's answer,
%% when it comes after a timeout, is not left in the caller's mailbox (a
%% server's, the user's shell).
-spec delivered(string(), timeout()) -> ok | timeout.
delivered(Who, Ms) ->
    {Pid, MRef} = spawn_monitor(fun() ->
                                        Ref = erlang:trace_delivered(all),
                                        receive {trace_delivered, all, Ref} -> ok end
                                end),
    receive
        {'DOWN', MRef, process, Pid, normal} -> ok
    after Ms ->
        exit(Pid, kill),
        demonitor(MRef, [flush]),
        logger:warning("kprof ~ts: the VM had not handed over every trace message "
                       "after ~b ms (its queue to the sink is backed up); what is read "
                       "now may lack the last events", [Who, Ms]),
        timeout
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec trace_mod() -> module().
trace_mod() ->
    binary_to_atom(<<"trace">>).

-spec all_sessions() -> [term()].
all_sessions() ->
    case supported() of
        true -> try ?TRACE:session_info(all) catch error:_ -> [] end;
        false -> []
    end.

%% The tracer as session_create/3 takes it.
-spec vm_tracer(tracer()) -> port() | {module(), term()}.
vm_tracer({tracer, Port}) -> Port;
vm_tracer({tracer, Module, State}) -> {Module, State}.

%% Flags without a tracer of their own.
-spec plain(list()) -> list().
plain(Flags) ->
    [F || F <- Flags, not (is_tuple(F) andalso element(1, F) =:= tracer)].

%% A pattern flag for the legacy API: `meta' with the tracer's meta tracer
%% (the NIF tells a meta event by its state).
-spec legacy_flag(term(), tracer()) -> term().
legacy_flag(meta, none) -> meta;
legacy_flag(meta, {tracer, Port}) -> {meta, Port};
legacy_flag(meta, {tracer, Module, Gen}) -> {meta, Module, {meta, Gen}};
legacy_flag(F, _Tracer) -> F.

%% In a session a meta pattern's tracer is the session's.
-spec session_flag(term()) -> term().
session_flag({meta, _}) -> meta;
session_flag({meta, _, _}) -> meta;
session_flag(F) -> F.
