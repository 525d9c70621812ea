%%% @doc What one trace event costs a traced process on this machine, for
%%% the correction of flame captures' times (`correct => true', the default).
%%%
%%% Every event a traced process makes (a call, a return_to, a scheduling
%%% or GC event) runs the VM's trace code and kprof's tracer in that process,
%%% between its own instructions: the time between two events holds the
%%% event's cost. The sink takes this cost off the graph's and the top
%%% table's times (port/callpath/correct.c), in every output.
%%%
%%% The cost is measured, not assumed: a workload of real code from stdlib
%%% (erl_scan, erl_parse, erl_lint and io_lib on a generated module, and a
%%% sort), whose calls are as short as most programs' are, runs untraced and
%%% then traced with a capture's own tracer, pattern and flags (no files:
%%% the capture is dropped), in fresh processes, rounds interleaved; the
%%% cost per event is (fastest traced - fastest untraced) / events: the
%%% tracing's own, not the time other jobs on the machine took the core for
%%% (which the traced run and the untraced one both suffer). It is measured
%%% per tracer (ring or port) and pattern (`true' or
%%% `callers') at the start of a capture when the last measure is more than
%%% a minute old (about 0.3 s: the cost moves with the machine's load), or
%%% with {@link kprof:flame_calibrate/0}, and kept (persistent_term).
%%% The rounds get 10 s in all: through a port whose queue is backed up
%%% (doc/guard.md, "Through the port tracer") a round's count waits for the
%%% VM, and no round after one the sink counted nothing of is run. Such a
%%% measure is not kept, the capture's times are not corrected (a warning
%%% says so), and the capture starts after 10 s at most, not minutes.
%%%
%%% The sink measures the cost again in each capture, from the capture's own
%%% intervals (per kind of event: calls and other events, return_tos), which
%%% holds the cache misses and load of the real code traced: that measure is
%%% the one taken off whenever the capture has enough intervals of a kind
%%% (port/callpath/correct.c, doc/internals-flame.md); this one is for the kinds of
%%% small captures, at most the mean of their intervals. What a capture took
%%% off, and from where, is in its summary (`correction') and said in each
%%% file's header.
-module(kprof_flame_calib).

-export([cost/1, calibrate/0, calibrate/1, work/1]).

-define(ROUNDS, 5).
%% How long the rounds may take in all, waits for the sink's count (a port's
%% backlog first) included: a measure takes about 0.3 s; what a backlog holds
%% up past this is no measure of the tracing's cost, and the capture waits.
-define(BUDGET_MS, 10000).
%% A measure older than this is made again at the next capture.
-define(MAX_AGE_MS, 60000).
-define(KEY(Tracer, Spec), {?MODULE, Tracer, Spec}).

%% @doc The cost per event (ns) for a capture with validated options `Cfg'
%% through the sink's current tracer: the measure kept, or one made now.
%% 0 with `correct => false'.
-spec cost(map()) -> non_neg_integer().
cost(#{correct := false}) ->
    0;
cost(Cfg) ->
    Spec = spec(Cfg),
    case tracer_kind() of
        undefined ->
            0;
        Kind ->
            Now = erlang:monotonic_time(millisecond),
            case persistent_term:get(?KEY(Kind, Spec), undefined) of
                #{per_event_ns := Ns, at := At} when Now - At =< ?MAX_AGE_MS -> Ns;
                _ -> maps:get(per_event_ns, measure(Kind, Spec), 0)
            end
    end.

%% @equiv calibrate(#{})
-spec calibrate() -> {ok, map()} | {error, term()}.
calibrate() ->
    calibrate(#{}).

%% @doc Measures the cost again for a capture with options `Opts' (`callers'
%% is the one that matters) and keeps it: `{ok, #{per_event_ns, rounds =>
%% [#{untraced_us, traced_us, events}], tracer, pattern, at}}' (`at': when,
%% erlang:monotonic_time(millisecond)).
-spec calibrate(map()) -> {ok, map()} | {error, term()}.
calibrate(Opts) ->
    case kprof_flame_options:validate(Opts, apply) of
        {ok, Cfg} ->
            case kprof_app:ensure_started() of
                ok ->
                    case tracer_kind() of
                        undefined -> {error, {sink, not_running}};
                        Kind -> {ok, measure(Kind, spec(Cfg))}
                    end;
                Error ->
                    Error
            end;
        Error ->
            Error
    end.

%% @private The workload: real stdlib code, a few ms untraced; traced, some
%% 100,000 events through the ring, a tenth through a port (whose events
%% cost ten times more and queue in the VM).
-spec work(ring | port) -> ok.
work(Kind) ->
    Src = source(case Kind of ring -> 12; port -> 1 end),
    {ok, Tokens, _} = erl_scan:string(Src),
    Forms = [begin {ok, F} = erl_parse:parse_form(T), F end || T <- split_forms(Tokens)],
    {ok, _} = erl_lint:module(Forms),
    _ = lists:sort([{erlang:phash2(F), F} || F <- Forms]),
    _ = lists:flatten(io_lib:format("~p", [hd(Forms)])),
    ok.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec spec(map()) -> true | callers.
spec(Cfg) ->
    case maps:get(callers, Cfg, false) of
        true -> callers;
        false -> true
    end.

-spec tracer_kind() -> ring | port | undefined.
tracer_kind() ->
    case kprof_sink:tracer() of
        {tracer, kprof_tracer, _} -> ring;
        {tracer, _Port} -> port;
        _ -> undefined
    end.

%% Interleaved rounds; the cost, kept.
-spec measure(ring | port, true | callers) -> map().
measure(Kind, Spec) ->
    work(Kind),
    Rounds = rounds(Kind, Spec, ?ROUNDS, erlang:monotonic_time(millisecond) + ?BUDGET_MS),
    %% The fastest round of each: what the OS's other work (another job on the
    %% machine taking the core for a while) only ever adds to.
    Ns = case [R || R = #{events := E} <- Rounds, E > 0] of
             [] -> 0;
             Ok -> max(0, lists:min([T || #{traced_us := T} <- Ok]) -
                          lists:min([U || #{untraced_us := U} <- Ok])) * 1000
                       div lists:max([E || #{events := E} <- Ok])
         end,
    R = #{per_event_ns => Ns, rounds => Rounds, tracer => Kind, pattern => Spec,
          at => erlang:monotonic_time(millisecond)},
    case Rounds =/= [] andalso [x || #{events := 0} <- Rounds] =:= [] of
        true ->
            %% Kept, not logged: a routine capture logs nothing (IEx shows
            %% every level); the figure is in each capture's summary
            %% (`correction') and files, and calibrate/0 returns it.
            persistent_term:put(?KEY(Kind, Spec), R),
            R;
        false ->
            %% A round the sink counted nothing of in the time left (it was
            %% busy or gone, or a port's backlog held the count up), or no
            %% time left for one: nothing kept, this capture's times are not
            %% corrected.
            logger:warning("kprof flame: the cost of tracing could not be measured (the sink "
                           "counted no event of a round within ~b ms); times are not corrected",
                           [?BUDGET_MS]),
            R#{per_event_ns => 0}
    end.

%% N rounds, each given the time left to Deadline: none once it has passed,
%% none after a round the sink counted nothing of.
-spec rounds(ring | port, true | callers, non_neg_integer(), integer()) -> [map()].
rounds(_Kind, _Spec, 0, _Deadline) ->
    [];
rounds(Kind, Spec, N, Deadline) ->
    case Deadline - erlang:monotonic_time(millisecond) of
        Left when Left > 0 ->
            case round_of(Kind, Spec, Deadline) of
                R = #{events := 0} -> [R];
                R -> [R | rounds(Kind, Spec, N - 1, Deadline)]
            end;
        _ ->
            []
    end.

%% One round: the workload untraced, then traced in a capture of its own.
-spec round_of(ring | port, true | callers, integer()) -> map().
round_of(Kind, Spec, Deadline) ->
    U = in_process(fun() -> timed(fun() -> work(Kind) end) end),
    {T, E} = in_process(fun() -> traced(Kind, Spec, Deadline) end),
    #{untraced_us => U, traced_us => T, events => E}.

%% The workload traced as flame_apply traces (its flags, the pattern), in a
%% capture that is dropped: the events the sink counted and the time.
-spec traced(ring | port, true | callers, integer()) -> {non_neg_integer(), non_neg_integer()}.
traced(Kind, Spec, Deadline) ->
    {ok, Cfg0} = kprof_flame_options:validate(#{callers => Spec =:= callers, progress => false,
                                                correct => false}, apply),
    Id = erlang:unique_integer([positive]),
    Cfg = Cfg0#{pids => [self()], hide => kprof_flame_run:hidden_frame(),
                runs => {?MODULE, work, 1}, correct_ns => 0},
    case kprof_flame_srv:open(Id, apply, Cfg) of
        {ok, Flags} ->
            {{ok, Us}, _End} = kprof_flame_run:traced(fun() -> timed(fun() -> work(Kind) end) end,
                                                      Flags),
            _ = kprof_flame_srv:close(Id),
            %% Through a port, the events are counted once the VM has handed
            %% them over (as kprof_flame's write waits for them).
            Left = fun() -> max(1, Deadline - erlang:monotonic_time(millisecond)) end,
            Handed = case Kind of
                         port -> kprof_trace_session:delivered("flame calibration", Left());
                         ring -> ok
                     end,
            Events = case Handed =:= ok andalso kprof_sink:command({flame_status, Id}, Left()) of
                         #{events := N} -> N;
                         _ -> 0
                     end,
            _ = kprof_sink:send({flame_drop, Id}),   % its answer waits for nobody
            _ = kprof_flame_srv:done(Id),
            {Us, Events};
        _ ->
            {0, 0}
    end.

-spec timed(fun(() -> ok)) -> non_neg_integer().
timed(F) ->
    T0 = erlang:monotonic_time(microsecond),
    ok = F(),
    erlang:monotonic_time(microsecond) - T0.

%% F in a fresh process (a heap of its own, as the capture's processes have).
-spec in_process(fun(() -> R)) -> R.
in_process(F) ->
    Self = self(),
    {Pid, Ref} = spawn_monitor(fun() -> Self ! {self(), done, F()} end),
    receive
        {Pid, done, R} ->
            receive {'DOWN', Ref, process, Pid, _} -> R end;
        {'DOWN', Ref, process, Pid, Why} ->
            error({calibration_round, Why})
    end.

%% A module of N functions of list, map and arithmetic code, as text.
-spec source(pos_integer()) -> string().
source(N) ->
    lists:flatten(
      ["-module(kprof_calib_src).\n-export([f1/2]).\n",
       [io_lib:format("f~b(X, Acc) when is_list(X) -> f~b(tl(X) ++ [~b], [length(X) | Acc]);\n"
                      "f~b(#{k := V} = M, Acc) -> f~b(maps:put(k, V + ~b, M), Acc);\n"
                      "f~b(N, Acc) when N > ~b -> [N * ~b, {N, Acc} | lists:reverse(Acc)];\n"
                      "f~b(N, Acc) -> case N rem 3 of 0 -> f~b(N + 1, Acc); _ -> {N, Acc} end.\n",
                      [K, K + 1, K, K, K + 1, K, K, K * 7, K, K, K + 1])
        || K <- lists:seq(1, N)],
       io_lib:format("f~b(X, Acc) -> {X, Acc}.~n", [N + 1])]).

%% The tokens of each form (up to and with its dot).
-spec split_forms([erl_scan:token()]) -> [[erl_scan:token()]].
split_forms(Tokens) ->
    split_forms(Tokens, [], []).

split_forms([], [], Acc) -> lists:reverse(Acc);
split_forms([{dot, _} = D | T], Cur, Acc) -> split_forms(T, [], [lists:reverse([D | Cur]) | Acc]);
split_forms([Tok | T], Cur, Acc) -> split_forms(T, [Tok | Cur], Acc).
