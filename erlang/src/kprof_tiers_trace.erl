%%% @doc Setting the tiers' tracing up and taking it off, on this node: the
%%% sink's `tiers_start', the trace patterns (full trace's module by module),
%%% the trace flags with their tracer (the kprof_tracer NIF's ring or the
%%% sink's port), the term the request path reads, the guard's watch; and
%%% every way back: a failed start, a stop, an abort from any process, a
%%% restarted server undoing what its killed predecessor left.
%%%
%%% On OTP 27 and later all of it is set in a trace session of kprof's own,
%%% `kprof_tiers' ({@link kprof_trace_session}), opened by a step of the
%%% start with the tracer; every way back destroys it, which takes the
%%% flags and patterns off at once, and nothing of another session's.
%%%
%%% A start is a list of steps, each with its undo ({@link start/1});
%%% {@link run_steps/2} runs them and, when one fails, undoes the ones done,
%%% newest first. What is about to be set is written in {@link
%%% kprof_records} (under `kprof_tiers') before the first step that sets
%%% anything.
-module(kprof_tiers_trace).

-include("kprof_tiers.hrl").

-export([start/1, run_steps/2]).
-export([untrace_now/1, untrace_at_once/2, untrace/3, clean/3, release_ring/0,
         publish/1, unpublish/0, arm_guard/3, disarm_guard/0, undo_record/1]).

-export_type([step/0]).

%% The record in kprof_records is the server's.
-define(RECORD, kprof_tiers).
%% procs: a process's `exit' lets the sink give its pid id back
%% (port/sink/pid_reclaim.c), so a server that spawns a process per request keeps
%% recording past the sink's cap on pids.
-define(FLAGS, [call, arity, return_to, procs, monotonic_timestamp]).
%% tiers_stop at a shutdown (terminate/2): unanswered, it still reaches the
%% sink in order. (A stop or an abort writes it without waiting: clean/3.)
-define(STOP_TIMEOUT, 2000).
-define(RESERVED_MODULES, [kprof, kprof_mark, kprof_tiers]).
%% Never full-traced: BIFs only, or tracing's own.
-define(FULL_SKIP, [erlang, erts_internal, erl_tracer, kprof_tracer, kprof_sink,
                    kprof_guard]).

-type pattern() :: kprof_tiers_plan:pattern().
-type mfa_spec() :: kprof_tiers:mfa_spec().
%% A step of a start: `Do' gives the context the next steps see, or an
%% error (having undone its own part); `Undo' takes back what `Do' set,
%% given the context of the failure.
-type step() :: {Do :: fun((map()) -> {ok, map()} | {error, term()}),
                 Undo :: fun((map()) -> term())}.

%%% Start

%% @doc Set the plan's tracing up: the record first (what is about to be
%% set, for a successor should the server be killed half-way), the sink (it
%% counts nothing until events come), then the patterns (full trace's
%% first: the tier patterns replace them on tier functions), then the flags,
%% then the term the request path reads. A step that fails undoes the ones
%% before it. `{ok, Plan, Counters, Port}': the plan with full trace's
%% patterns and the events baseline, the request counters, the sink's port.
%% First the guard's claim ({@link kprof_guard:claim/1}): `{error, {busy,
%% Mode}}' while a flame capture or a calls session runs; a start that
%% fails lets it go.
-spec start(#plan{}) -> {ok, #plan{}, counters:counters_ref(), port()} | {error, term()}.
start(Plan) ->
    %% Flame's call patterns, kept between web captures, would make every
    %% process the tiers flag send every call.
    ok = kprof_flame_srv:release_patterns(),
    case kprof_guard:claim(tiers) of
        ok ->
            case claimed(Plan, kprof_sink:port()) of
                {ok, _, _, _} = Started -> Started;
                {error, _} = Error -> disarm_guard(), Error
            end;
        {error, _} = Busy ->
            Busy
    end.

-spec claimed(#plan{}, port() | {error, term()}) ->
          {ok, #plan{}, counters:counters_ref(), port()} | {error, term()}.
claimed(Plan, Port) when is_port(Port) ->
    Steps = [record_step(), calibrate_step(), sink_step(), session_step(),
             full_patterns_step(), patterns_step(), baseline_step(), flags_step(), publish_step()],
    case run_steps(Steps, #{plan => Plan, port => Port,
                            full_modules => full_modules(Plan#plan.full)}) of
        {ok, #{plan := Plan1, counters := C}} -> {ok, Plan1, C, Port};
        {error, _} = Error -> Error
    end;
claimed(_Plan, {error, Reason}) ->
    {error, {sink, Reason}}.

%% @doc Run the steps in order, each on the context the one before gave; when
%% one fails, the undo of each step done runs, newest first, on the context
%% as it was then, and its error is the result.
-spec run_steps([step()], map()) -> {ok, map()} | {error, term()}.
run_steps(Steps, Ctx) ->
    run_steps(Steps, Ctx, []).

-spec run_steps([step()], map(), [fun((map()) -> term())]) -> {ok, map()} | {error, term()}.
run_steps([], Ctx, _Undos) ->
    {ok, Ctx};
run_steps([{Do, Undo} | Rest], Ctx, Undos) ->
    case Do(Ctx) of
        {ok, Ctx1} ->
            run_steps(Rest, Ctx1, [Undo | Undos]);
        {error, _} = Error ->
            lists:foreach(fun(U) -> U(Ctx) end, Undos),
            Error
    end.

-spec nothing(map()) -> ok.
nothing(_Ctx) ->
    ok.

-spec record_step() -> step().
record_step() ->
    {fun(Ctx = #{plan := Plan, port := Port, full_modules := Mods}) ->
             kprof_records:put(?RECORD, #{phase => starting, plan => Plan, port => Port,
                                          full_modules => Mods,
                                          since => erlang:monotonic_time(nanosecond)}),
             {ok, Ctx}
     end,
     fun(_) -> kprof_records:delete(?RECORD) end}.

%% What an event costs here, with the tracer the flags will name: before
%% the sink's tiers_start (it reads the calibration's events first, and
%% takes them for nobody's) and before the events baseline. A limit left in
%% the sink by a start that never armed comes off first: it would count the
%% calibration's events (kprof_guard:limits_off/0).
-spec calibrate_step() -> step().
calibrate_step() ->
    {fun(Ctx = #{plan := Plan, port := Port}) ->
             ok = kprof_guard:limits_off(),
             Cal = kprof_tiers_cost:calibrate(tracer(Port)),
             {ok, Ctx#{plan := Plan#plan{calibration = Cal}}}
     end,
     fun nothing/1}.

-spec sink_step() -> step().
sink_step() ->
    {fun(Ctx = #{plan := Plan}) ->
             case kprof_sink:command({tiers_start, Plan#plan.sink_specs,
                                      Plan#plan.sink_opts}) of
                 ok ->
                     {ok, Ctx};
                 {error, {busy, _Mode}} = Busy ->
                     %% A flame capture holds the patterns (the sink decides,
                     %% in command order).
                     Busy;
                 Other ->
                     %% Unanswered, tiers_start may still reach the sink.
                     _ = kprof_sink:send(tiers_stop),
                     {error, {sink, Other}}
             end
     end,
     fun(_) -> kprof_sink:command(tiers_stop) end}.

%% The tracer, and the session that traces with it (its undo takes off
%% whatever the later steps set there).
%% With the tracer NIF the request markers are not traced: the request path
%% writes their records itself (kprof_tracer:mark/3,4), and their patterns
%% are not set (marks/2).
-spec session_step() -> step().
session_step() ->
    {fun(Ctx = #{plan := Plan, port := Port}) ->
             Tracer = tracer(Port),
             case kprof_trace_session:open(kprof_tiers, Tracer) of
                 {ok, Session} -> {ok, Ctx#{plan := marks(Plan#plan{session = Session}, Tracer)}};
                 {error, _} = Error -> Error
             end
     end,
     fun(#{plan := #plan{session = Session}}) when Session =/= undefined ->
             kprof_trace_session:close(Session);
        (_) ->
             ok
     end}.

-spec full_patterns_step() -> step().
full_patterns_step() ->
    {fun(Ctx = #{plan := Plan, full_modules := Mods}) ->
             Watch = set_full_patterns(Plan#plan.session, Mods),
             Full = [{{M, '_', '_'}, MS} || {module, M, MS, _, _} <- Watch],
             {ok, Ctx#{plan := Plan#plan{full_patterns = Full, full_watch = Watch}}}
     end,
     fun(#{plan := Plan}) -> remove_patterns(Plan#plan.session, Plan#plan.full_patterns) end}.

-spec patterns_step() -> step().
patterns_step() ->
    {fun(Ctx = #{plan := Plan}) ->
             case set_patterns(Plan#plan.session, Plan#plan.patterns, []) of
                 ok -> {ok, Ctx};
                 {error, _} = Error -> Error
             end
     end,
     fun(#{plan := Plan}) -> remove_patterns(Plan#plan.session, Plan#plan.patterns) end}.

%% max_events counts from here: the guard is armed after the flags are set.
-spec baseline_step() -> step().
baseline_step() ->
    {fun(Ctx = #{plan := Plan}) ->
             E0 = kprof_guard:events_baseline(Plan#plan.limits),
             {ok, Ctx#{plan := Plan#plan{events0 = E0}}}
     end,
     fun nothing/1}.

-spec flags_step() -> step().
flags_step() ->
    {fun(Ctx = #{plan := Plan}) ->
             case set_flags(Plan#plan.session) of
                 ok -> {ok, Ctx};
                 {error, _} = Error -> Error
             end
     end,
     fun nothing/1}.

-spec publish_step() -> step().
publish_step() ->
    {fun(Ctx = #{plan := Plan}) -> {ok, Ctx#{counters => publish(Plan)}} end,
     fun(_) -> unpublish() end}.

set_patterns(_Session, [], _Done) ->
    ok;
set_patterns(Session, [{Spec, MS} | Rest], Done) ->
    %% What trace_pattern/3 raises is the error's reason, as a `catch' gives it.
    Failed = fun(Why) ->
                     remove_patterns(Session, Done),
                     {error, {trace_pattern_failed, Spec, Why}}
             end,
    try kprof_trace_session:function(Session, Spec, MS, kprof_tiers_plan:pattern_flags(Spec)) of
        N when is_integer(N), N > 0 ->
            set_patterns(Session, Rest, [Spec | Done]);
        Other ->
            Failed(Other)
    catch
        throw:Thrown when is_integer(Thrown), Thrown > 0 ->
            set_patterns(Session, Rest, [Spec | Done]);
        throw:Thrown -> Failed(Thrown);
        error:Reason:Stack -> Failed({'EXIT', {Reason, Stack}});
        exit:Reason -> Failed({'EXIT', Reason})
    end.

%% Full trace: the tier match spec on every function of every loaded
%% module but kprof's own, module by module (each trace_pattern/3 call stops
%% every scheduler for a moment; one call on {'_','_','_'} would stop them
%% for the whole of it), yielding in between. BIFs are left out (`erlang',
%% `erts_internal', and the BIFs of other modules): a traced BIF sends its
%% own return_to, which the sink's chain model does not expect.
%% kprof_guard_reload:module_pattern/4 sets them, and gives the pattern the guard
%% watches for a module (one sentinel function) and puts back the same way
%% after a code reload of it.
-spec set_full_patterns(kprof_trace_session:session(), [module()]) -> [kprof_guard:pattern()].
set_full_patterns(Session, Mods) ->
    MS = kprof_tiers_plan:tier_ms(),
    [begin
         W = kprof_guard_reload:module_pattern(Session, M, MS, [local]),
         erlang:yield(),
         W
     end || M <- Mods].

%% The modules full trace patterns (none without full trace): written in the
%% record before any is set.
-spec full_modules(false | all | [term()]) -> [module()].
full_modules(false) -> [];
full_modules(_) -> full_trace_modules().

%% Every loaded module but kprof's and the BIF modules.
-spec full_trace_modules() -> [module()].
full_trace_modules() ->
    Own = case application:get_key(kprof, modules) of
              {ok, Mods} -> Mods;
              undefined -> []
          end,
    Skip = sets:from_list(Own ++ ?RESERVED_MODULES ++ ?FULL_SKIP, [{version, 2}]),
    lists:sort([M || {M, _} <- code:all_loaded(), not sets:is_element(M, Skip)]).

-spec set_flags(kprof_trace_session:session()) -> ok | {error, term()}.
set_flags(Session) ->
    Tracer = kprof_trace_session:tracer(Session),
    ok = discard_unread(Tracer),
    try kprof_trace_session:process(Session, all, true, flags_for(Tracer)) of
        _ -> ok
    catch
        error:Reason ->
            _ = release_ring(),
            {error, {trace_flags_failed, Reason}}
    end.

%% `procs' is for the `exit' (the sink ends a killed process's requests,
%% gives its pid id back); the tracer NIF drops the rest of what it brings
%% before the VM builds it: a spawn and a spawned per process a server
%% spawns per request.
-spec discard_unread(tuple()) -> ok.
discard_unread({tracer, kprof_tracer, Gen}) ->
    kprof_tracer:discard(Gen, [spawn, spawned, register, unregister]);
discard_unread({tracer, _Port}) ->
    ok.

%% The tracer NIF takes its own timestamps (the VM's, asked with
%% monotonic_timestamp, would cost the traced process as much again): only a
%% port needs them.
-spec flags_for(tuple()) -> [atom()].
flags_for({tracer, _Port}) -> ?FLAGS;
flags_for({tracer, kprof_tracer, _Gen}) -> ?FLAGS -- [monotonic_timestamp].

%% How the request path marks a request's start and end: through the ring of
%% the tracer NIF's generation, with no marker pattern; or, with the port
%% tracer, by calling kprof_mark's functions, traced.
-spec marks(#plan{}, tuple()) -> #plan{}.
marks(Plan = #plan{patterns = Patterns}, {tracer, kprof_tracer, Gen}) ->
    Plan#plan{patterns = [P || P = {{M, _, _}, _} <- Patterns, M =/= kprof_mark],
              marks = {ring, Gen}};
marks(Plan, {tracer, _Port}) ->
    Plan#plan{marks = traced}.

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

%% @doc The tracer NIF writes no more: every process it traced drops it at
%% its next event. The ring stays the sink's, for the next mode.
-spec release_ring() -> ok.
release_ring() ->
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
    ok.

%% Patterns (or bare specs) off, whatever of them is set.
-spec remove_patterns(kprof_trace_session:session(), [mfa_spec() | pattern()]) -> ok.
remove_patterns(Session, Patterns) ->
    lists:foreach(fun({Spec, MS}) when is_list(MS) -> pattern_off(Session, Spec);
                     (Spec) -> pattern_off(Session, Spec)
                  end, Patterns).

%% A spec's pattern off (of its kind: pattern_flags/1), whether it was set or
%% not (a module gone, a spec the VM refuses, the session destroyed: nothing
%% to take off).
-spec pattern_off(kprof_trace_session:session(), mfa_spec()) -> ok.
pattern_off(Session, Spec) ->
    _ = try kprof_trace_session:function(Session, Spec, false, kprof_tiers_plan:pattern_flags(Spec))
        catch _:_ -> 0 end,
    ok.

%% @doc What {@link kprof_tiers:abort/2} does at once: nothing that waits for the sink, which may be
%% seconds behind (waiting for it there kept the patterns on for the whole
%% command timeout after an overload). The NIF writes no more, flags and
%% patterns come off: the tiers' session destroyed (any process may call
%% this: it is found by its name), or on the legacy API each of them.
-spec untrace_now([pattern()]) -> ok.
untrace_now(Patterns) ->
    release_ring(),
    case kprof_trace_session:supported() of
        true ->
            kprof_trace_session:destroy(kprof_tiers);
        false ->
            _ = try kprof_trace_session:process(kprof_trace_session:legacy_api(), all, false,
                                                ?FLAGS)
                catch _:_ -> 0
                end,
            remove_patterns(kprof_trace_session:legacy_api(), Patterns)
    end.


%%% Stop

%% @doc What the server does itself at a stop or an abort: requests stop,
%% flags and patterns come off; nothing that waits for another process (the
%% guard may be busy aborting): {@link clean/3} does the rest, the guard's
%% disarming first and these again after it.
-spec untrace_at_once(#plan{}, counters:counters_ref()) -> ok.
untrace_at_once(#plan{patterns = Patterns, full_patterns = Full}, C) ->
    counters:put(C, ?ACTIVE, 0),
    untrace_now(Patterns ++ Full).

%% Requests stop, the guard is disarmed (while it is armed it puts back the
%% patterns it sees gone: it takes that for a code reload), flags and
%% patterns come off. The sink's part (the ring, tiers_stop) is the caller's.
-spec untrace_vm(#plan{}, counters:counters_ref()) -> ok.
untrace_vm(Plan = #plan{patterns = Patterns, full_patterns = Full}, C) ->
    untrace_at_once(Plan, C),
    disarm_guard(),
    untrace_now(Patterns ++ Full).

%% @doc All of it, at a shutdown: the VM's part, then the sink's, in order
%% (unless the sink is lost, `SinkLost =/= false': gone with the ring and
%% its tiers): the NIF is detached, the sink reads what the ring holds and
%% stops taking tier events (tiers_stop; flame captures may start again),
%% and the record goes: nothing is left to undo. A sink that does not
%% answer still gets tiers_stop, in order, whenever it reads again.
-spec untrace(#plan{}, counters:counters_ref(), false | map()) -> ok.
untrace(Plan, C, false) ->
    untrace_vm(Plan, C),
    release_ring(),
    _ = try kprof_sink:command(tiers_stop, ?STOP_TIMEOUT) catch _:_ -> ok end,
    kprof_records:delete(?RECORD);
untrace(Plan, C, _SinkLost) ->
    untrace_vm(Plan, C),
    kprof_records:delete(?RECORD).

%% @doc The rest of a stop, an abort or a restart, run by the server in a
%% process of its own: the guard disarmed (it may be finishing an abort of
%% its own), flags and patterns off again (it may have put some back
%% before), the tracer NIF detached (the sink reads what the ring holds
%% before its next command), then tiers_stop written, in order with every
%% other command, without waiting for its answer. A sink that died
%% (`Lost'), or a new one, is not written to.
-spec clean(#plan{}, port() | undefined, boolean()) -> ok.
clean(#plan{patterns = Patterns, full_patterns = Full}, Port, Lost) ->
    disarm_guard(),
    %% Not when a session began since (after a sink's kill -9, on the new
    %% sink): its tracer NIF generation is live, its flags and patterns are
    %% its own, and kprof_tracer:detach/0 and erlang:trace(all, false, _)
    %% took them (a flame capture started then got no events). The abort or
    %% stop turned ours off already (untrace_at_once/2).
    Newer = newer_session(),
    _ = Newer orelse untrace_now(Patterns ++ Full),
    _ = case kprof_sink:port() of
            Port when not Lost ->
                _ = Newer orelse release_ring(),
                try kprof_sink:send(tiers_stop) catch _:_ -> ok end;
            _ ->
                ok    % gone, or a new sink: nothing of ours in it
        end,
    ok.

%% Another run traces: the tracer NIF has a live generation again (ours was
%% detached by the abort or stop), or the guard has something else armed.
-spec newer_session() -> boolean().
newer_session() ->
    Live = try kprof_tracer:live() catch error:_ -> 0 end,
    %% (A guard that does not answer, or none: kprof_late_call's error.)
    Armed = case kprof_guard:status() of
                #{armed := A} -> A -- [tiers];
                {error, _} -> []
            end,
    Live =/= 0 orelse Armed =/= [].

%%% The request path's term

%% @doc What the request path reads ({@link kprof_tiers:enter/1}); replacing
%% it costs a global GC, so it changes only at start and stop. Returns the
%% request counters, active.
-spec publish(#plan{}) -> counters:counters_ref().
publish(#plan{sample = Sample, patterns = Patterns, full_patterns = Full, marks = Marks}) ->
    C = counters:new(?COUNTERS, [write_concurrency]),
    counters:put(C, ?ACTIVE, 1),
    counters:put(C, ?SAMPLE_PPM, max(1, round(Sample * 1000000))),
    %% abort/2 untraces these: full trace's too.
    persistent_term:put(?TIERS_PT, {Sample, C, Patterns ++ Full, Marks}),
    C.

%% @doc The request path's term gone: requests run untraced.
-spec unpublish() -> ok.
unpublish() ->
    _ = persistent_term:erase(?TIERS_PT),
    ok.

%%% The guard


%% @doc Arm the guard: it watches for overload and limits, and calls
%% `Abort' (the server's {@link kprof_tiers:abort/2}); it counts
%% the patterns it puts back after a code reload in `Counters' (the report's
%% `reapplied').
%% Full trace's module patterns are given as `{module, ...}' patterns: the
%% guard checks one function of each module (a reload replaces the whole
%% module), puts the module's pattern back the way it was set, then the
%% tier patterns on its functions. A catch-all goes with them: the guard
%% never re-applies it (`'_'' is no loaded module) and, should it abort,
%% clears every local pattern with it in one call rather than module by
%% module (after {@link kprof_tiers:abort/2} has removed them itself).
-spec arm_guard(#plan{}, counters:counters_ref(), fun((term(), term()) -> ok)) -> ok.
arm_guard(#plan{patterns = Patterns, limits = Limits, full = Full, full_watch = Watch,
                events0 = E0, session = Session}, Counters, Abort) ->
    CatchAll = case Full of
                   false -> [];
                   _ -> [{{'_', '_', '_'}, kprof_tiers_plan:tier_ms(), [local]}]
               end,
    Arm0 = #{abort => Abort, owner => self(),
             patterns => Watch ++ [{MFA, MS, kprof_tiers_plan:pattern_flags(MFA)}
                                   || {MFA, MS} <- Patterns] ++ CatchAll,
             reapplied => fun(_MFA) -> counters:add(Counters, ?REAPPLIED, 1) end},
    Arm1 = case Session of
               undefined -> Arm0;
               _ -> Arm0#{session => kprof_trace_session:weak(Session)}
           end,
    Arm = case E0 of
              undefined -> Arm1;
              _ -> Arm1#{events0 => E0}
          end,
    case whereis(kprof_guard) of
        undefined ->
            ok;
        _ ->
            Limits1 = case map_size(Limits) of
                          0 -> #{};
                          _ -> #{limits => element(2, kprof_guard:validate_limits(Limits))}
                      end,
            %% What the call raises is a refusal too, as a `catch' gives it.
            Armed = fun(ok) -> ok;
                       (Other) -> logger:warning("kprof_tiers: the guard refused to arm: ~p",
                                                 [Other])
                    end,
            try kprof_guard:arm(tiers, maps:merge(Arm, Limits1)) of
                Answer -> Armed(Answer)
            catch
                throw:Thrown -> Armed(Thrown);
                error:Reason:Stack -> Armed({'EXIT', {Reason, Stack}});
                exit:Reason -> Armed({'EXIT', Reason})
            end
    end.

%% @doc The guard no longer watches the tiers.
-spec disarm_guard() -> ok.
disarm_guard() ->
    _ = try kprof_guard:disarm(tiers) catch _:_ -> ok end,
    ok.

%%% A restart: what the killed server left

%% @doc What the record says was set comes off, whatever of it was: the
%% requests' switch, the guard's watch, the tracer NIF's session, the flags
%% of every process whose tracer is kprof's (the sink's port of the record,
%% or the tracer NIF of any generation: flags another tracer set stay), and
%% the patterns of the plan and of full trace's modules; on OTP 27 and
%% later the tiers' trace session (the record's copy of the plan kept it
%% alive), destroyed once counted. Counts what it found set.
-spec undo_record(map()) -> #{processes := non_neg_integer(), patterns := non_neg_integer()}.
undo_record(Rec = #{plan := Plan = #plan{patterns = Patterns}}) ->
    Port = maps:get(port, Rec, undefined),
    _ = case maps:get(counters, Rec, undefined) of
            undefined -> ok;
            C -> counters:put(C, ?ACTIVE, 0)
        end,
    unpublish(),
    disarm_guard(),
    Session = case Plan#plan.session of
                  undefined -> kprof_trace_session:legacy_api();
                  S -> S
              end,
    %% Counted before the NIF's session goes: a stale NIF tracer is gone at
    %% the process's next event (or trace_info/2).
    Procs = untrace_ours(Session, Port),
    release_ring(),
    Specs = [Spec || {Spec, _} <- Patterns]
        ++ [{M, '_', '_'} || M <- maps:get(full_modules, Rec, [])],
    Set = length([Spec || Spec <- Specs, has_pattern(Session, Spec)]),
    remove_patterns(Session, Specs),
    kprof_trace_session:close(Session),
    kprof_trace_session:destroy(kprof_tiers),
    #{processes => Procs, patterns => Set}.

-spec untrace_ours(kprof_trace_session:session(), port() | undefined) -> non_neg_integer().
untrace_ours(Session, Port) ->
    case kprof_trace_session:legacy(Session) of
        true ->
            Off = fun(Who) -> try erlang:trace(Who, false, ?FLAGS) catch _:_ -> 0 end end,
            _ = traced_by_ours(new, Port) andalso Off(new),
            length([P || P <- erlang:processes(), traced_by_ours(P, Port), Off(P) =:= 1]);
        false ->
            %% Every flag in the session is kprof's.
            Flagged = fun(Who) ->
                              try kprof_trace_session:info(Session, Who, flags) of
                                  {flags, [_ | _]} -> true;
                                  _ -> false
                              catch
                                  error:badarg -> false
                              end
                      end,
            length([P || P <- erlang:processes(), Flagged(P)])
    end.

%% Whether Who's tracer is the tracer NIF or this sink's port. OTP 25's spec
%% of erlang:trace_info/2 gives a tracer module as {tracer, Module, State};
%% the VM answers {tracer, {Module, State}}, which dialyzer would call a
%% pattern that can never match.
-dialyzer({no_match, traced_by_ours/2}).
-spec traced_by_ours(pid() | new, port() | undefined) -> boolean().
traced_by_ours(Who, Port) ->
    case try erlang:trace_info(Who, tracer) catch _:_ -> undefined end of
        {tracer, {kprof_tracer, _}} -> true;
        {tracer, Port} -> is_port(Port);
        _ -> false
    end.

%% A pattern (of the spec's kind: pattern_flags/1) on at least one function
%% the spec names.
-spec has_pattern(kprof_trace_session:session(), mfa_spec()) -> boolean().
has_pattern(Session, Spec = {M, F, A}) ->
    [Kind] = kprof_tiers_plan:pattern_flags(Spec),
    Fns = case erlang:module_loaded(M) of
              true -> M:module_info(functions);
              false -> []
          end,
    Local = fun(MFA) ->
                    try kprof_trace_session:info(Session, MFA, traced) =:= {traced, Kind}
                    catch error:badarg -> false
                    end
            end,
    lists:any(fun({F1, A1}) ->
                      (F =:= '_' orelse F1 =:= F) andalso (A =:= '_' orelse A1 =:= A)
                          andalso Local({M, F1, A1})
              end, Fns).

%% The state of the run the killed server had: its plan, counters and what it
%% had polled; the sink (if it is the same one) stops taking events, closes
%% the ring and gives its rows once more, as after an abort.
