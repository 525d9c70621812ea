%%% @doc Other trace sessions (OTP 27 and later), as far as kprof must know.
%%%
%%% From OTP 27 a process can be traced by several isolated trace sessions
%%% (the `trace' module), and kprof traces in sessions of its own ({@link
%%% kprof_trace_session}): the legacy API's (`erlang:trace/3', which
%%% recon_trace and older tools use), dbg's, tprof's and any other are
%%% others, and none keeps kprof out of a process. Two things still matter:
%%%
%%% <ul>
%%% <li>kprof's list of other tracers (`kprof:status()', the notice when a
%%%     mode starts) names the processes other sessions trace, since their
%%%     cost adds to kprof's: {@link others/0};</li>
%%% <li>on OTP 27 to 29, two sessions tracing garbage collection on the
%%%     same process crash the emulator (issue 11624 in OTP's tracker; the
%%%     legacy API's session counts): a flame capture with `gc => true' is
%%%     refused, with that reason, while another session traces garbage
%%%     collection on a process it would trace: {@link gc_conflict/1}. (A
%%%     session that starts tracing garbage collection during such a
%%%     capture is not kprof's to stop.)</li>
%%% </ul>
%%%
%%% Both are gated by `erlang:function_exported(trace, session_create, 3)'
%%% (the `trace' module loaded first): before OTP 27 there is one session,
%%% and both answer nothing. What is kprof's own, left out of both, is
%%% {@link ours/1}'s answer (kprof_guard's list of other tracers and
%%% kprof_flame_srv's checks ask it too). The decisions are made by
%%% {@link others/1} and {@link gc_conflict/2} from a probe, a map of the
%%% answers the VM gives ({@link probe/0}), so that tests can give other
%%% answers than those of the OTP they run on.
-module(kprof_sessions).

-export([supported/0, others/0, gc_conflict/1, probe/0, ours/1]).
-export([others/1, gc_conflict/2]).

-export_type([probe/0, target/0]).

-define(SUPPORTED, {?MODULE, supported}).

%% What the VM answers, as functions: the real ones are probe/0's.
-type probe() :: #{supported := boolean(),
                   processes := fun(() -> [pid()]),
                   sessions := fun((pid() | new) -> undefined | [term()]),
                   info := fun((term(), pid() | new, flags | tracer) -> term()),
                   ours := fun((term()) -> boolean())}.
%% The processes a capture traces: these (and, with `new', the processes
%% they spawn), or `all' of them and any new one (flame_capture's trigger
%% gives flags to whichever process calls it).
-type target() :: all | {[pid()], Children :: boolean()}.

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Whether this VM has trace sessions (OTP 27 and later). Asked once
%% and kept: before OTP 27, loading `trace' searches the whole code path for
%% a module that is not there, which a capture must not wait for each time.
-spec supported() -> boolean().
supported() ->
    case persistent_term:get(?SUPPORTED, undefined) of
        undefined ->
            Mod = trace_module(),
            _ = code:ensure_loaded(Mod),
            Supported = erlang:function_exported(Mod, session_create, 3),
            persistent_term:put(?SUPPORTED, Supported),
            Supported;
        Supported ->
            Supported
    end.

%% @doc Processes traced by a trace session other than kprof's, the legacy
%% API's among them, with that session's tracer: `[{Pid, Tracer}]', kprof's
%% own tracers left out. `[]' before OTP 27.
-spec others() -> [{pid(), term()}].
others() ->
    others(probe()).

%% @doc `none', or `{Who, Tracer}': a process of `Target' (or `new', the
%% default for processes yet to be spawned) on which a session other than
%% kprof's traces garbage collection, and that session's tracer. `none'
%% before OTP 27.
-spec gc_conflict(target()) -> none | {pid() | new, term()}.
gc_conflict(Target) ->
    gc_conflict(Target, probe()).

%% @doc The VM's answers: `session_info/1' of the `trace' module for the
%% sessions of a process, its `info/3' for a session's flags or tracer on it
%% (the legacy API's session, `{legacy, default}', which `info/3' refuses
%% with `badarg', through `erlang:trace_info/2').
-spec probe() -> probe().
probe() ->
    Mod = trace_module(),
    #{supported => supported(),
      processes => fun erlang:processes/0,
      sessions => fun(Who) -> Mod:session_info(Who) end,
      info => fun({legacy, default}, Who, Item) -> erlang:trace_info(Who, Item);
                 (Session, Who, Item) -> Mod:info(Session, Who, Item)
              end,
      ours => fun ours/1}.

%% @doc Whether a tracer, as `erlang:trace_info(Pid, tracer)' or a
%% session's `info/3' gives it, is kprof's: the sink's port (flame
%% captures, the tiers' port tracer) or the tracer NIF, `{kprof_tracer,
%% Generation}' (of any generation: a stale one removes itself at the
%% process's next event).
-spec ours(term()) -> boolean().
ours({kprof_tracer, _Gen}) ->
    true;
ours(Tracer) when is_port(Tracer) ->
    %% kprof_sink:port/0 reads a persistent_term: it answers even while
    %% the sink's server is suspended on a busy port.
    whereis(kprof_sink) =/= undefined
        andalso Tracer =:= (try kprof_sink:port() catch _:_ -> undefined end);
ours(_Tracer) ->
    false.

%% @doc {@link others/0} with these answers.
-spec others(probe()) -> [{pid(), term()}].
others(#{supported := false}) ->
    [];
others(P = #{processes := Processes}) ->
    lists:usort([{Pid, T} || Pid <- Processes(), T <- tracers(P, Pid)]).

%% @doc {@link gc_conflict/1} with these answers.
-spec gc_conflict(target(), probe()) -> none | {pid() | new, term()}.
gc_conflict(_Target, #{supported := false}) ->
    none;
gc_conflict(all, P = #{processes := Processes}) ->
    first_gc(P, [new | Processes()]);
gc_conflict({Pids, Children}, P) ->
    first_gc(P, [new || Children] ++ Pids).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% The `trace' module by a name xref and dialyzer do not follow: before
%% OTP 27 there is none, and they would report its functions as unknown.
-spec trace_module() -> module().
trace_module() ->
    binary_to_atom(<<"trace">>).

%% The tracers of the sessions tracing Who that are not kprof's. A session
%% can end, or a process exit, between two answers: what fails is skipped.
-spec tracers(probe(), pid() | new) -> [term()].
tracers(P = #{ours := Ours}, Who) ->
    [T || S <- sessions(P, Who), {tracer, T} <- [ask(P, S, Who, tracer)],
          T =/= [], not Ours(T)].

-spec first_gc(probe(), [pid() | new]) -> none | {pid() | new, term()}.
first_gc(_P, []) ->
    none;
first_gc(P = #{ours := Ours}, [Who | More]) ->
    Gc = [T || S <- sessions(P, Who),
               {flags, Flags} <- [ask(P, S, Who, flags)],
               lists:member(garbage_collection, Flags),
               {tracer, T} <- [ask(P, S, Who, tracer)],
               not Ours(T)],
    case Gc of
        [T | _] -> {Who, T};
        [] -> first_gc(P, More)
    end.

-spec sessions(probe(), pid() | new) -> [term()].
sessions(#{sessions := Sessions}, Who) ->
    try Sessions(Who) of
        L when is_list(L) -> L;
        _ -> []
    catch
        error:_ -> []
    end.

-spec ask(probe(), term(), pid() | new, flags | tracer) -> term().
ask(#{info := Info}, Session, Who, Item) ->
    try
        Info(Session, Who, Item)
    catch
        error:_ -> undefined
    end.
