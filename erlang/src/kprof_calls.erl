%%% @doc Call counting: how many times each function is called, in every
%%% process, for a while. recon_trace's counting, through kprof's ring.
%%%
%%% {@link kprof:calls/2} (or {@link run/2}, which also returns how the
%%% session went) traces the functions of a spec in every process but
%%% kprof's own, for `ms' milliseconds or until `max' calls in all,
%%% whichever comes first, then turns tracing off and prints the counts,
%%% most called first. The counting is the sink's (`kprof_sink:command(calls)'):
%%% each call is one record the tracer NIF writes into the ring, as for the
%%% tiers, so a call costs the traced process what a tier call costs it
%%% (`make bench-tiers', "calls" beside "ring").
%%%
%%% == A session ==
%%%
%%% A process calls `lists:seq(1, 3)' a thousand times, then
%%% `ets:lookup/2' once, and sleeps a millisecond, in a loop:
%%% ```
%%% 1> kprof:calls({lists, seq, '_'}, #{ms => 1000}).
%%% kprof calls: 1 functions, 100,000 calls in 0.319 s (stopped: max); 100 calls past max not counted
%%%     calls      %  function
%%%    100000  100.0  lists:seq/2
%%% {ok,[#{calls => 100000,mfa => {lists,seq,2}}]}
%%% 2> kprof:calls(lists, #{max => 10, print => false}).
%%% {ok,[#{calls => 8,mfa => {lists,seq_loop,3}},
%%%      #{calls => 1,mfa => {lists,keyfind,3}},
%%%      #{calls => 1,mfa => {lists,seq,2}}]}
%%% 3> kprof:calls({ets, lookup, 2}, [{ms, 500}, {time, true}]).
%%% kprof calls: 1 functions, 243 calls in 0.501 s (stopped: ms)
%%%     calls      %    time_ms  us/call  function
%%%       243  100.0      0.877     3.61  ets:lookup/2
%%% {ok,[#{calls => 243,mfa => {ets,lookup,2},time_calls => 243,time_us => 877}]}
%%% 4> kprof:calls({nosuch, f, 1}, #{}).
%%% {error,{no_functions,{nosuch,f,1}}}
%%% 5> kprof:calls({'_', f, 1}, #{}).
%%% {error,{bad_spec,{'_',f,1}}}
%%% '''
%%% The first session stopped at the default `max' (100,000 calls) before
%%% its second was over; the 100 calls made before the flags were off are
%%% said, not counted. The second counts a call of `lists:keyfind/3' some
%%% other process made: every process is traced but kprof's own (the
%%% session's among them).

%%% == Specs ==
%%%
%%% `{M, F, A}' with `F' an atom or `'_'' and `A' an arity or `'_'', `M'
%%% alone for `{M, '_', '_'}', or a list of those. `M' must be a module, never
%%% `'_'' (as recon_trace, kprof refuses to trace every module); it is loaded
%%% if it is not. A spec that matches no function is `{error, {no_functions,
%%% Spec}}'; anything else `{error, {bad_spec, X}}'. Nothing is traced then.
%%%
%%% == Options ==
%%%
%%% A map or a keyword list (see {@link opts()}): `ms' (stop after this
%%% many ms), `max' (stop after this many calls in all), `time', `print',
%%% `top', and the guard's limits (`max_lag_ms', ...). The session stops
%%% at whichever of `ms' and `max' comes first; a missing one takes its
%%% default, 5000 ms and 100,000 calls, so a call always returns: say
%%% `infinity' for no bound (not both).
%%%
%%% == What you get ==
%%%
%%% `max' is exact with the tracer NIF (the default): the NIF gives the
%%% session a budget of `max' call records ({@link kprof_tracer:budget/2});
%%% a call past it writes nothing and is counted in the summary's
%%% `over_max', never lost silently; the session sees the budget spent
%%% within 10 ms and turns the flags off. So the counts add up to exactly
%%% `max' when `max' stopped it. With the port tracer (`kprof:start(#{tracer
%%% => port})') the sink's `max_events' limit (the guard's, {@link
%%% kprof_guard}) stops it instead, when the sink reads the event past
%%% `max': the counts may pass `max' by what the VM traced until the flags
%%% were off (all of it counted, none lost). A process that does nothing but
%%% call makes events faster than the VM hands them to the port; the sink's
%%% alert then waits behind that backlog, and the guard's `max_lag_ms' may
%%% end the session first, as `{aborted, overload}' (every call still
%%% counted). The ring has no such backlog.
%%%
%%% `time => true' adds `time_us' and `time_calls' per function from the
%%% VM's `call_time' (set on the same functions for the session): the time
%%% the function was the running traced function, its own time apart from
%%% the other traced functions it calls, scheduled-out time left out. The
%%% VM counts that time without any trace event, so the ring carries the
%%% same one record per call; `time_calls' is the VM's count of timed calls,
%%% which includes the calls past `max' until the flags are off (the mean
%%% is `time_us / time_calls').
%%%
%%% `stopped' says what ended the session: `ms', `max', or `{aborted, Kind}'
%%% when the guard turned tracing off (overload, a limit, the sink down):
%%% the counts are then those the sink had; the table's header says it.
%%%
%%% == Safety ==
%%%
%%% Everything is validated before any flag or pattern is set: a bad spec
%%% or option changes nothing. A session arms {@link kprof_guard} before it
%%% sets anything, with itself (the caller) as the owner: overload aborts
%%% it, and if the caller dies the guard turns its flags, patterns and
%%% `call_time' off. While tiers or a flame capture run (or another calls
%%% session) the answer is `{error, {busy, Mode}}', as it is when any
%%% process is already traced for new processes (`erlang:trace_info(new,
%%% tracer)'), and nothing changes; the tiers and flame captures answer
%%% `{error, {busy, calls}}' during a session.
-module(kprof_calls).

%% PUBLIC
-export([run/2, validate/2, format/2, running/0]).

-export_type([spec/0, opts/0, row/0, summary/0]).

%% How often the session looks at the NIF's budget (ms).
-define(BUDGET_POLL_MS, 10).
-define(DELIVERED_TIMEOUT, 5000).
%% The last count waits for what the port tracer still holds (as a flame
%% capture's files do).
-define(COUNT_TIMEOUT, 30000).
-define(FLAGS, [call, arity]).
%% Never traced: the tracer and the tracing itself.
-define(RESERVED, [kprof_tracer, erl_tracer, kprof_calls]).

-type spec() :: module() | {module(), atom(), arity() | '_'} | [module() | {module(), atom(), arity() | '_'}].
%% Options, all optional:
%% <ul>
%% <li>`ms': `pos_integer() | infinity', stop after this many ms;</li>
%% <li>`max': `pos_integer() | infinity', stop after this many calls in all;
%%     the defaults: `#{ms => 5000, max => 100000}', each for a missing one;
%%     both `infinity' is `{bad_option, ms, infinity}';</li>
%% <li>`time': `boolean()', default false: `time_us' and `time_calls' per row;</li>
%% <li>`print': `boolean()', default true: the table to the caller's group leader;</li>
%% <li>`top': `non_neg_integer()', default 20: rows printed (all are returned);</li>
%% <li>`names': `erlang' (default) or `elixir': the table's functions named
%%     `lists:seq/2', or `Enum.sum/1' and `:lists.seq/2' ({@link kprof_names});</li>
%% <li>the guard's limits (`max_lag_ms', `max_stall_ms', `max_queue_bytes',
%%     `max_memory_bytes', `max_events', `rate', `max_seconds'), see
%%     {@link kprof_guard}.</li>
%% </ul>
-type opts() :: #{ms => pos_integer() | infinity, max => pos_integer() | infinity,
                  time => boolean(), print => boolean(), top => non_neg_integer(),
                  names => kprof_names:style(),
                  atom() => term()}.
-type row() :: #{mfa := mfa(), calls := non_neg_integer(),
                 time_us => non_neg_integer(), time_calls => non_neg_integer()}.
%% `functions': functions traced; `calls': calls counted (the sum of the
%% rows); `over_max': calls past `max' not written (NIF only);
%% `elapsed_us': from the flags on to the flags off.
-type summary() :: #{stopped := ms | max | {aborted, atom()},
                     calls := non_neg_integer(), functions := non_neg_integer(),
                     over_max := non_neg_integer(), elapsed_us := non_neg_integer(),
                     ms := pos_integer() | infinity, max := pos_integer() | infinity,
                     tracer := ring | port}.

-type mfa_spec() :: {module(), atom(), arity() | '_'}.
-type tracer() :: {tracer, port()} | {tracer, kprof_tracer, pos_integer()}.
%% How max is kept: the NIF's budget, the sink's max_events (port), or no max.
-type budget() :: nif | port | none.
-type stopped() :: ms | max | {aborted, atom()}.

-record(plan, {specs :: [{module(), atom(), arity() | '_'}],
               mfas :: [mfa()],
               ms :: pos_integer() | infinity,
               max :: pos_integer() | infinity,
               time :: boolean(),
               print :: boolean(),
               top :: non_neg_integer(),
               names :: kprof_names:style(),
               limits :: map()}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Count the calls of `Spec' in every process (kprof's own aside) for
%% `ms' ms or until `max' calls, print the table (unless `print => false')
%% and return the rows, most called first, with the session's summary.
%% Starts kprof if it is not running. Errors, with nothing traced: `{bad_spec,
%% X}', `{no_functions, Spec}', `{bad_option, K, V}', `{unknown_options,
%% Ks}', `{bad_options, Opts}', `{busy, Mode}', `{sink, Reason}'. A sink
%% that dies during the session takes its counts with it: `{error, {sink,
%% {restarted, {aborted, sink_down}}}}', tracing off.
-spec run(spec(), opts()) -> {ok, [row()], summary()} | {error, term()}.
run(Spec, Opts) ->
    case validate(Spec, Opts) of
        {ok, Plan} ->
            case kprof_app:ensure_started() of
                ok -> session(Plan);
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc Every check of {@link run/2} before anything is set: the spec (its
%% modules loaded, its functions listed) and the options. `{ok, Plan}' (an
%% opaque term) or the error {@link run/2} would return.
-spec validate(term(), term()) -> {ok, term()} | {error, term()}.
validate(Spec, Opts) ->
    case specs(Spec) of
        {ok, Specs} ->
            case options(Opts) of
                {ok, O} ->
                    case functions(Specs, []) of
                        {ok, MFAs} -> {ok, plan(Specs, MFAs, O)};
                        {error, _} = Error -> Error
                    end;
                {error, _} = Error ->
                    Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @doc The table of a session's rows, as {@link run/2} prints it: a header
%% with the summary, then the `Top' most called functions.
-spec format([row()], summary() | #{top := non_neg_integer(), atom() => term()}) -> iolist().
format(Rows, Summary) ->
    #{calls := Total, functions := _} = Summary,
    Top = maps:get(top, Summary, 20),
    Time = lists:any(fun(R) -> is_map_key(time_us, R) end, Rows),
    Header = io_lib:format("kprof calls: ~b functions, ~ts calls in ~ts s (stopped: ~ts)~ts~n",
                           [length(Rows), thousands(Total),
                            seconds(maps:get(elapsed_us, Summary, 0)),
                            stopped(maps:get(stopped, Summary, ms)),
                            over_text(maps:get(over_max, Summary, 0))]),
    Cols = case Time of
               true -> io_lib:format("  ~7s ~6s ~10s ~8s  function~n", ["calls", "%", "time_ms", "us/call"]);
               false -> io_lib:format("  ~7s ~6s  function~n", ["calls", "%"])
           end,
    {Shown, Rest} = lists:split(min(Top, length(Rows)), Rows),
    Names = maps:get(names, Summary, erlang),
    Lines = [row_line(R, Total, Time, Names) || R <- Shown],
    More = case Rest of
               [] -> [];
               _ -> io_lib:format("  ... ~b more functions, ~ts calls (all in the result)~n",
                                  [length(Rest), thousands(lists:sum([C || #{calls := C} <- Rest]))])
           end,
    [Header, Cols, Lines, More].

%% @doc Whether a calls session runs on this node (the guard has it armed):
%% the tiers and flame captures answer `{error, {busy, calls}}' then. Read
%% from the guard's record ({@link kprof_records}), not by asking the guard:
%% a start never waits behind an abort.
-spec running() -> boolean().
running() ->
    case kprof_records:get(kprof_guard) of
        #{armed := #{calls := _}} -> true;
        _ -> false
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%%% Validation: all of it before anything is set

-spec specs(term()) -> {ok, [mfa_spec()]} | {error, {bad_spec, term()}}.
specs([]) ->
    {error, {bad_spec, []}};
specs(L) when is_list(L) ->
    case proper(L) andalso specs_list(L, []) of
        false -> {error, {bad_spec, L}};
        %% Not a list of specs at all (a string): the list is the culprit.
        {error, {bad_spec, X}} when not is_tuple(X), not is_atom(X) -> {error, {bad_spec, L}};
        Result -> Result
    end;
specs(One) ->
    specs_list([One], []).

-spec specs_list([term()], [mfa_spec()]) -> {ok, [mfa_spec()]} | {error, {bad_spec, term()}}.
specs_list([], Acc) ->
    {ok, lists:reverse(Acc)};
specs_list([S | Rest], Acc) ->
    case spec(S) of
        {ok, MFA} -> specs_list(Rest, [MFA | Acc]);
        error -> {error, {bad_spec, S}}
    end.

-spec spec(term()) -> {ok, {module(), atom(), arity() | '_'}} | error.
spec(M) when is_atom(M) ->
    spec({M, '_', '_'});
spec({M, F, A} = MFA) when is_atom(M), M =/= '_', is_atom(F), A =:= '_' orelse
                           (is_integer(A) andalso A >= 0 andalso A =< 255) ->
    case lists:member(M, ?RESERVED) of
        true -> error;
        false -> {ok, MFA}
    end;
spec(_) ->
    error.

-spec options(term()) -> {ok, map()} | {error, term()}.
options(Opts) when is_list(Opts) ->
    case proper(Opts) andalso lists:all(fun({K, _}) -> is_atom(K); (_) -> false end, Opts) of
        true -> options(maps:from_list(lists:reverse(Opts)));
        false -> {error, {bad_options, Opts}}
    end;
options(Opts) ->
    case kprof_opts:check(calls, Opts) of
        {ok, #{ms := infinity, max := infinity}} ->
            {error, {bad_option, ms, infinity}};
        {ok, O} ->
            {ok, O};
        {error, _} = Error ->
            Error
    end.

%% The functions each spec names, its module loaded first.
-spec functions([{module(), atom(), arity() | '_'}], [mfa()]) ->
          {ok, [mfa()]} | {error, {no_functions, term()}}.
functions([], Acc) ->
    {ok, lists:usort(Acc)};
functions([{M, F, A} = Spec | Rest], Acc) ->
    _ = code:ensure_loaded(M),
    Fns = case erlang:module_loaded(M) of
              true -> [{M, F1, A1} || {F1, A1} <- M:module_info(functions),
                                      F =:= '_' orelse F =:= F1, A =:= '_' orelse A =:= A1];
              false -> []
          end,
    case Fns of
        [] -> {error, {no_functions, Spec}};
        _ -> functions(Rest, Fns ++ Acc)
    end.

-spec plan([mfa_spec()], [mfa()], map()) -> #plan{}.
plan(Specs, MFAs, O) ->
    #plan{specs = Specs, mfas = MFAs, ms = maps:get(ms, O), max = maps:get(max, O),
          time = maps:get(time, O), print = maps:get(print, O), top = maps:get(top, O),
          names = maps:get(names, O),
          limits = maps:with(kprof_guard:limit_keys(), O)}.

-spec proper(list()) -> boolean().
proper(L) ->
    try length(L) of _ -> true catch error:badarg -> false end.

%%% The session

-spec session(#plan{}) -> {ok, [row()], summary()} | {error, term()}.
session(Plan) ->
    %% Flame's call patterns, kept between web captures, would count too.
    ok = kprof_flame_srv:release_patterns(),
    case kprof_sink:tracer() of
        {error, Reason} ->
            {error, {sink, Reason}};
        Tracer ->
            Ref = make_ref(),
            case arm(Plan, Tracer, Ref) of
                ok ->
                    case busy_new() of
                        free ->
                            traced(Plan, Tracer, Ref);
                        {busy, _} = Busy ->
                            disarm(),
                            {error, Busy}
                    end;
                {error, _} = Error ->
                    Error
            end
    end.

%% Flags someone set on every new process: another mode, or a tool of the
%% user's, owns the trace flags.
-spec busy_new() -> free | {busy, kprof | {tracer, term()}}.
busy_new() ->
    case erlang:trace_info(new, tracer) of
        {tracer, []} -> free;
        {tracer, T} ->
            case kprof_guard:ours(T) of
                true -> {busy, kprof};
                false -> {busy, {tracer, T}}
            end;
        _ -> free
    end.

%% The guard first, alone (no other mode armed), so a session is watched from
%% its first pattern on; its abort tells this process and takes everything
%% off, call_time and the budget included (the guard does the rest: the
%% patterns, every kprof tracer's flags, the NIF's detach).
-spec arm(#plan{}, tracer(), reference()) -> ok | {error, term()}.
arm(Plan = #plan{specs = Specs, limits = Limits0, max = Max}, Tracer, Ref) ->
    Self = self(),
    Abort = fun(Kind, Info) ->
                    Self ! {kprof_calls_abort, Ref, Kind, Info},
                    untrace(Plan)
            end,
    Spec0 = #{abort => Abort, owner => Self,
              patterns => [{S, true, [local]} || S <- Specs]},
    %% The port tracer has no budget: the sink's max_events stops it (every
    %% event is a call), its limit alert read as soon as the sink reads the
    %% event past it (a command's reply would wait behind the whole backlog).
    Limits = case Tracer of
                 {tracer, Port} when is_port(Port), is_integer(Max) ->
                     Limits0#{max_events => min_events(port_bound(Max),
                                                       maps:get(max_events, Limits0, infinity))};
                 _ ->
                     Limits0
             end,
    Spec = case map_size(Limits) of
               0 -> Spec0;
               _ -> {ok, L} = kprof_guard:validate_limits(Limits),
                    Spec0#{limits => L}
           end,
    %% What the call raises is refused too, as a `catch' would give it.
    Armed = fun(ok) -> ok;
               ({error, {busy, _}} = Busy) -> Busy;
               (Other) -> {error, {guard, Other}}
            end,
    try kprof_guard:arm_alone(calls, Spec) of
        Answer -> Armed(Answer)
    catch
        throw:Thrown -> Armed(Thrown);
        error:Reason:Stack -> Armed({'EXIT', {Reason, Stack}});
        exit:Reason -> Armed({'EXIT', Reason})
    end.

-spec min_events(pos_integer(), pos_integer() | infinity) -> pos_integer().
min_events(Max, infinity) -> Max;
min_events(Max, Given) -> min(Max, Given).

%% The sink's max_events trips on the event past it: at the max-th call.
%% (max => 1 trips on the second.)
-spec port_bound(pos_integer()) -> pos_integer().
port_bound(1) -> 1;
port_bound(Max) -> Max - 1.

-spec traced(#plan{}, tracer(), reference()) -> {ok, [row()], summary()} | {error, term()}.
traced(Plan = #plan{specs = Specs, time = Time}, Tracer, Ref) ->
    Port = kprof_sink:port(),
    case kprof_sink:command(calls) of
        Base when is_list(Base) ->
            Budget = set_budget(Plan, Tracer),
            [erlang:trace_pattern(S, true, [local]) || S <- Specs],
            _ = Time andalso [erlang:trace_pattern(S, true, [call_time]) || S <- Specs],
            Ours = ours(),
            T0 = erlang:monotonic_time(microsecond),
            _ = erlang:trace(all, true, [Tracer | flags(Tracer)]),
            untrace_pids(Ours),
            Stopped = wait(Plan, Budget, Ref, T0),
            Elapsed = erlang:monotonic_time(microsecond) - T0,
            finish(Plan, Tracer, Port, Base, Stopped, Elapsed);
        Other ->
            disarm(),
            {error, {sink, Other}}
    end.

-spec flags(tracer()) -> [atom()].
flags({tracer, _Port}) -> [monotonic_timestamp | ?FLAGS];
flags({tracer, kprof_tracer, _Gen}) -> ?FLAGS.

%% This process and kprof's servers are not counted (their own calls of
%% lists, say, would be): listed before the flags are set, their flags off
%% right after, this process first, with nothing but BIFs called between.
-spec ours() -> [pid()].
ours() ->
    [self() | [P || N <- registered(), lists:prefix("kprof", atom_to_list(N)),
                    P <- [whereis(N)], is_pid(P)]].

-spec untrace_pids([pid()]) -> ok.
untrace_pids([]) ->
    ok;
untrace_pids([P | Ps]) ->
    _ = try erlang:trace(P, false, ?FLAGS) catch _:_ -> 0 end,
    untrace_pids(Ps).

-spec set_budget(#plan{}, tracer()) -> budget().
set_budget(#plan{max = Max}, {tracer, kprof_tracer, Gen}) when is_integer(Max) ->
    ok = kprof_tracer:budget(Gen, Max),
    nif;
set_budget(#plan{max = Max}, _Tracer) when is_integer(Max) ->
    port;
set_budget(_Plan, _Tracer) ->
    none.

%% Until the deadline, the budget spent, or the guard's abort.
-spec wait(#plan{}, budget(), reference(), integer()) -> stopped().
wait(Plan = #plan{ms = Ms}, Budget, Ref, T0) ->
    Deadline = case Ms of
                   infinity -> infinity;
                   _ -> T0 div 1000 + Ms
               end,
    wait_loop(Plan, Budget, Ref, Deadline).

-spec wait_loop(#plan{}, budget(), reference(), integer() | infinity) -> stopped().
wait_loop(Plan, Budget, Ref, Deadline) ->
    Now = erlang:monotonic_time(millisecond),
    Poll = case Budget of
               nif -> ?BUDGET_POLL_MS;
               _ -> infinity
           end,
    Left = case Deadline of
               infinity -> infinity;
               _ -> max(0, Deadline - Now)
           end,
    PortBound = case Budget of
                    port -> port_bound(Plan#plan.max);
                    _ -> undefined
                end,
    receive
        {kprof_calls_abort, Ref, limit, #{what := max_events, bound := Bound}}
          when Budget =:= port, Bound =:= PortBound ->
            max;
        {kprof_calls_abort, Ref, Kind, _Info} ->
            {aborted, Kind}
    after min(Poll, Left) ->
        case spent(Plan, Budget) of
            true -> max;
            false when Left =/= infinity, Left =< Poll -> ms;
            false -> wait_loop(Plan, Budget, Ref, Deadline)
        end
    end.

-spec spent(#plan{}, budget()) -> boolean().
spent(_Plan, nif) ->
    maps:get(left, kprof_tracer:budget()) =:= 0;
spent(_Plan, _) ->
    false.

%% Flags off, every event delivered, call_time and the budget read, the
%% guard disarmed, patterns and budget off, the ring detached; then the
%% sink's counts (it reads the ring before every command).
-spec finish(#plan{}, tracer(), port() | {error, term()}, [{mfa(), non_neg_integer()}], stopped(),
             integer()) -> {ok, [row()], summary()} | {error, term()}.
finish(Plan = #plan{mfas = MFAs, time = Time}, Tracer, Port, Base, Stopped, Elapsed) ->
    _ = try erlang:trace(all, false, [Tracer | flags(Tracer)]) catch _:_ -> 0 end,
    _ = try erlang:trace(all, false, ?FLAGS) catch _:_ -> 0 end,
    Delivered = erlang:trace_delivered(all),
    receive {trace_delivered, all, Delivered} -> ok after ?DELIVERED_TIMEOUT -> ok end,
    Times = case Time of
                true -> call_times(MFAs);
                false -> #{}
            end,
    Over = case Tracer of
               {tracer, kprof_tracer, Gen} ->
                   case kprof_tracer:budget() of
                       #{gen := Gen, over := O} -> O;
                       _ -> 0
                   end;
               _ -> 0
           end,
    %% Disarmed first: an armed guard puts back patterns it sees gone.
    disarm(),
    untrace(Plan),
    _ = try kprof_tracer:detach() catch _:_ -> ok end,
    case kprof_sink:port() =:= Port andalso kprof_sink:command(calls, ?COUNT_TIMEOUT) of
        false ->
            %% The sink died: its counts went with it (a new one has none).
            {error, {sink, {restarted, Stopped}}};
        After when is_list(After) ->
            Rows = rows(diff(After, Base, MFAs), Times),
            Summary = #{stopped => Stopped, calls => lists:sum([C || #{calls := C} <- Rows]),
                        functions => length(MFAs), over_max => Over, elapsed_us => Elapsed,
                        ms => Plan#plan.ms, max => Plan#plan.max,
                        tracer => case Tracer of {tracer, _} -> port; _ -> ring end},
            _ = Plan#plan.print andalso
                io:put_chars(format(Rows, Summary#{top => Plan#plan.top,
                                                   names => Plan#plan.names})),
            {ok, Rows, Summary};
        Other ->
            {error, {sink, Other}}
    end.

%% What a session sets, off (also the guard's abort, from the guard).
-spec untrace(#plan{}) -> ok.
untrace(#plan{specs = Specs, time = Time}) ->
    _ = [try erlang:trace_pattern(S, false, [local]) catch _:_ -> 0 end || S <- Specs],
    _ = Time andalso [try erlang:trace_pattern(S, false, [call_time]) catch _:_ -> 0 end
                      || S <- Specs],
    _ = try kprof_tracer:budget(0, 0) catch _:_ -> ok end,
    ok.

%% The guard lets the session go (a guard gone, or down: nothing to let go).
-spec disarm() -> ok.
disarm() ->
    _ = try kprof_guard:disarm(calls) catch _:_ -> ok end,
    ok.

%% {TimeUs, Calls} per function that has any, summed over processes.
-spec call_times([mfa()]) -> #{mfa() => {non_neg_integer(), non_neg_integer()}}.
call_times(MFAs) ->
    maps:from_list(
      [{MFA, {lists:sum([S * 1000000 + Us || {_, _, S, Us} <- PerPid]),
              lists:sum([N || {_, N, _, _} <- PerPid])}}
       || MFA <- MFAs,
          {call_time, PerPid} <- [erlang:trace_info(MFA, call_time)],
          is_list(PerPid), PerPid =/= []]).

%% The session's calls: the sink's counts now, less those before it.
-spec diff([{mfa(), non_neg_integer()}], [{mfa(), non_neg_integer()}], [mfa()]) ->
          [{mfa(), pos_integer()}].
diff(After, Base, MFAs) ->
    B = maps:from_list(Base),
    Set = sets:from_list(MFAs, [{version, 2}]),
    [{MFA, N - maps:get(MFA, B, 0)} || {MFA, N} <- After, sets:is_element(MFA, Set),
                                       N > maps:get(MFA, B, 0)].

-spec rows([{mfa(), non_neg_integer()}], #{mfa() => {non_neg_integer(), non_neg_integer()}}) ->
          [row()].
rows(Counts, Times) ->
    C = maps:from_list(Counts),
    Keys = lists:usort(maps:keys(C) ++ maps:keys(Times)),
    Rows = [row(MFA, maps:get(MFA, C, 0), maps:find(MFA, Times)) || MFA <- Keys],
    lists:sort(fun(#{calls := A, mfa := X}, #{calls := B, mfa := Y}) -> {B, X} =< {A, Y} end,
               Rows).

-spec row(mfa(), non_neg_integer(), {ok, {non_neg_integer(), non_neg_integer()}} | error) -> row().
row(MFA, N, {ok, {Us, TC}}) -> #{mfa => MFA, calls => N, time_us => Us, time_calls => TC};
row(MFA, N, error) -> #{mfa => MFA, calls => N}.

%%% The table

-spec row_line(row(), non_neg_integer(), boolean(), kprof_names:style()) -> iolist().
row_line(R = #{mfa := MFA, calls := N}, Total, Time, Names) ->
    Pct = case Total of
              0 -> 0.0;
              _ -> 100 * N / Total
          end,
    Fun = kprof_names:mfa(MFA, Names),
    case Time of
        true ->
            Us = maps:get(time_us, R, 0),
            TC = maps:get(time_calls, R, 0),
            PerCall = case TC of
                          0 -> "-";
                          _ -> io_lib:format("~.2f", [Us / TC])
                      end,
            io_lib:format("  ~7b ~6.1f ~10.3f ~8s  ~ts~n", [N, Pct, Us / 1000, PerCall, Fun]);
        false ->
            io_lib:format("  ~7b ~6.1f  ~ts~n", [N, Pct, Fun])
    end.

-spec thousands(non_neg_integer()) -> string().
thousands(N) ->
    S = integer_to_list(N),
    lists:reverse(group(lists:reverse(S))).

-spec group(string()) -> string().
group([A, B, C, D | Rest]) -> [A, B, C, $, | group([D | Rest])];
group(L) -> L.

-spec seconds(non_neg_integer()) -> iolist().
seconds(Us) when Us >= 10000000 -> io_lib:format("~.1f", [Us / 1000000]);
seconds(Us) -> io_lib:format("~.3f", [Us / 1000000]).

-spec stopped(stopped()) -> iolist().
stopped({aborted, Kind}) -> io_lib:format("ABORTED: ~p", [Kind]);
stopped(Why) -> atom_to_list(Why).

-spec over_text(non_neg_integer()) -> iolist().
over_text(0) -> "";
over_text(N) -> io_lib:format("; ~ts calls past max not counted", [thousands(N)]).
