%%% @doc What a flame graph costs, end to end (`make bench-flame').
%%%
%%% Part 1, big captures: `kprof:flame_apply/2' of a loop that makes 3
%%% trace events an iteration (a body call, its return_to, the loop's tail
%%% call), two sizes side by side in one run, each with a fresh sink:
%%% `Small' and `Big' events (1 M and 10 M by default), through the tracer
%%% the application environment gives (`{kprof, tracer}': the ring by
%%% default). Through the port tracer the loop waits a millisecond every 64
%%% iterations, as real work does now and then (a loop of nothing but calls
%%% makes events faster than the VM hands them to any port, and the VM's port
%%% queue then drains in quadratic time: doc/guard.md); through the ring it
%%% does not wait (`Pause': `auto', or the iterations between waits, 0 for
%%% none). Per size: events recorded and how many came through the ring,
%%% events/s while tracing, the sink's peak RSS (VmHWM), the time from the
%%% end of the work to the files on disk, each format's write time and size,
%%% and whether the guard aborted or alerted (`kprof:subscribe/0',
%%% `kprof:status()''s `aborted') or anything logged a warning. Targets
%%% (issues 6 and 10): the small capture traced in at most 1.5 s with no
%%% alert; the big one in at most 100 MB of sink memory, all files written
%%% at most 2 s after the work ends.
%%%
%%% Part 2, end to end: the wall time from the call to the folded file on
%%% disk for two workloads (bench/flame_work.erl: `fib(Fib)', deep, and
%%% `wide(Wide)', a lists/maps/ets loop), by
%%% <ul>
%%% <li>`kprof:flame_apply(Fun, #{output_format => folded, output_directory
%%%     => Dir})' with the tracer NIF's ring (`{kprof, tracer}' = `ring'),</li>
%%% <li>the same with the port tracer (`{kprof, tracer}' = `port'),</li>
%%% <li>bench/flame_baseline.erl, an in-VM flame graph of eflame's design
%%%     (an Erlang process as the tracer, writing folded lines),</li>
%%% <li>and the workload untraced, for scale;</li>
%%% </ul>
%%% one warm-up of each, then `Rounds' rounds, the modes interleaved within
%%% each round. kprof runs already (as in a node that has it); its sink is
%%% not restarted between runs. Medians and their ratios; the events each
%%% mode saw, so that like is compared with like.
%%%
%%% Prints the tables and rewrites the "Flame capture" section of
%%% bench/RESULTS.md. Not a test: nothing fails on a number.
-module(flame_bench).

-export([main/1, events_loop/2, leaf2/1, log/2]).

%% @doc `main([Small, Big, Pause, Rounds, Fib, Wide, ResultsFile])', strings
%% (from the Makefile).
-spec main([string()]) -> no_return().
main([Small0, Big0, Pause0, Rounds0, Fib0, Wide0, Results]) ->
    Sizes = [list_to_integer(Small0), list_to_integer(Big0)],
    [Rounds, Fib, Wide] = [list_to_integer(S) || S <- [Rounds0, Fib0, Wide0]],
    logger:set_handler_config(default, level, error),
    ok = logger:add_handler(flame_bench, ?MODULE, #{config => #{pid => self()}, level => info}),
    Dir = filename:absname(filename:join(["_build", "bench", "flame-out"])),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    {module, _} = code:ensure_loaded(flame_work),
    Tracer = application:get_env(kprof, tracer, ring),
    Pause = pause(Pause0, Tracer),
    Load0 = overhead_bench:load_average(),
    io:format("flame bench: ~p events through the ~s tracer (pause every ~b); "
              "load average ~s~n", [Sizes, Tracer, Pause, Load0]),
    Rows = [capture(N, Pause, Dir) || N <- Sizes],
    Load1 = overhead_bench:load_average(),
    Table = table(Rows),
    io:put_chars(Table),
    Work = [{fib, Fib}, {wide, Wide}],
    io:format("flame bench: end to end, ~p, ~b rounds~n", [Work, Rounds]),
    E2E = end_to_end(Work, Rounds, Dir),
    Load2 = overhead_bench:load_average(),
    E2ETable = e2e_table(E2E, Work),
    io:put_chars(E2ETable),
    ok = overhead_bench:write_section(
           Results, "Flame capture",
           [section(Table, Rows, Tracer, Pause, [Load0, Load1, Load2]),
            e2e_section(E2ETable, E2E, Work, Rounds)]),
    io:format("flame bench: wrote the \"Flame capture\" section of ~s~n", [Results]),
    halt(0).

pause("auto", port) -> 64;
pause("auto", _Ring) -> 0;
pause(N, _) -> list_to_integer(N).

%% @private The traced loop (see the module doc): `Every' iterations
%% between waits of a millisecond, 0 for none.
-spec events_loop(non_neg_integer(), non_neg_integer()) -> ok.
events_loop(0, _Every) ->
    ok;
events_loop(N, Every) ->
    _ = ?MODULE:leaf2(N),
    case Every > 0 andalso N rem Every =:= 0 of
        true -> receive after 1 -> ok end;
        false -> ok
    end,
    events_loop(N - 1, Every).

%% @private
-spec leaf2(integer()) -> integer().
leaf2(N) ->
    N + 1.

%% @private logger handler: the sink's figures of the written capture, and
%% every warning (or worse) while the bench runs.
-spec log(logger:log_event(), logger:handler_config()) -> ok.
log(#{msg := {report, #{what := kprof_flame_written} = R}}, #{config := #{pid := Pid}}) ->
    Pid ! {written, R},
    ok;
log(#{level := Level, msg := Msg} = E, #{config := #{pid := Pid}}) ->
    case logger:compare_levels(Level, warning) of
        lt -> ok;
        _ -> Pid ! {logged, Level, text(Msg, E)}
    end,
    ok.

text({string, S}, _) -> unicode:characters_to_list(S);
text({report, R}, _) -> lists:flatten(io_lib:format("~0p", [R]));
text({Format, Args}, _) -> lists:flatten(io_lib:format(Format, Args)).

%%% Part 1: big captures

-spec capture(pos_integer(), non_neg_integer(), file:filename()) -> map().
capture(Want, Pause, Dir) ->
    ok = kprof:start(),
    ok = kprof:subscribe(),
    ok = logger:set_primary_config(level, info),
    #{os_pid := OsPid} = kprof_sink:info(),
    S0 = kprof:sink_stats(),
    Iterations = Want div 3 + 1000,
    Self = self(),
    T0 = erlang:monotonic_time(microsecond),
    %% The bounds of the guard are the defaults but for the lag: this
    %% machine may be shared, and the bench measures memory and time.
    Outcome = kprof:flame_apply(fun() ->
                                        R = ?MODULE:events_loop(Iterations, Pause),
                                        Self ! {work_done, erlang:monotonic_time(microsecond)},
                                        R
                                end, #{output_directory => Dir,
                                       name => "bench-" ++ integer_to_list(Want),
                                       max_lag_ms => 60000}),
    T2 = erlang:monotonic_time(microsecond),
    T1 = receive {work_done, T} -> T end,
    Info = receive {written, #{info := I}} -> I after 10000 -> #{} end,
    ok = logger:set_primary_config(level, notice),
    S1 = kprof:sink_stats(),
    HwmKb = vm_hwm_kb(OsPid),
    Alerts = alerts(kprof:status(), outcome(Outcome)),
    ok = kprof:stop(),
    Files = files_of(Outcome),
    Events = maps:get(events, Info, 0),
    #{events => Events, want => Want, traced_s => (T1 - T0) / 1.0e6,
      files_s => (T2 - T1) / 1.0e6, hwm_kb => HwmKb, write_us => maps:get(write_us, Info, #{}),
      sizes => [{format_of(F), filelib:file_size(F)} || F <- Files],
      via_ring => delta(ring_records, S0, S1), ring_drops => delta(ring_drops, S0, S1),
      trace_events => delta(trace_events, S0, S1),
      outcome => outcome(Outcome), alerts => Alerts}.

%% The guard's alerts and the warnings logged since the last call, and the
%% abort kprof:status() tells of if no alert did. The guard's alert of an
%% aborted capture may come a little after the capture returns: waited for
%% (at most a second), so that it counts for its own run.
alerts(Status, Outcome) ->
    Late = case Outcome of
               {aborted, _} ->
                   receive {kprof_alert, Kind, Info} -> [alert(Kind, Info)] after 1000 -> [] end;
               _ ->
                   []
           end,
    As = Late ++ alerts(),
    case maps:get(aborted, Status, undefined) of
        A when is_map(A) ->
            case lists:keymember(alert, 1, As) of
                true -> As;
                false -> [{alert, aborted, io_lib:format("~ts", [maps:get(message, A, "")])} | As]
            end;
        _ ->
            As
    end.

alert(Kind, Info) ->
    {alert, Kind, io_lib:format("~ts", [maps:get(message, Info, "")])}.

alerts() ->
    receive
        {kprof_alert, Kind, Info} -> [alert(Kind, Info) | alerts()];
        {logged, Level, Text} -> [{Level, Text} | alerts()]
    after 0 -> []
    end.

outcome({ok, _, _}) -> ok;
outcome({error, {aborted, Kind, _, _}}) -> {aborted, Kind};
outcome({error, Reason}) -> {error, Reason}.

%% The files a capture left, whether it ended or was aborted.
files_of({ok, _, Files}) -> Files;
files_of({error, {aborted, _, _, Files}}) -> Files;
files_of(_) -> [].

delta(K, S0, S1) when is_map(S0), is_map(S1) -> maps:get(K, S1, 0) - maps:get(K, S0, 0);
delta(_, _, _) -> 0.

format_of(F) ->
    case {lists:prefix("callgrind.out.", filename:basename(F)), lists:suffix(".speedscope.json", F)} of
        {true, _} -> callgrind;
        {_, true} -> speedscope;
        _ -> list_to_atom(tl(filename:extension(F)))
    end.

vm_hwm_kb(OsPid) ->
    {ok, Status} = file:read_file("/proc/" ++ integer_to_list(OsPid) ++ "/status"),
    [Line] = [L || L <- binary:split(Status, <<"\n">>, [global]),
                   binary:match(L, <<"VmHWM:">>) =/= nomatch],
    [_, Kb | _] = string:lexemes(binary_to_list(Line), " \t"),
    list_to_integer(Kb).

table([S, B]) ->
    Row = fun(Name, F, Fmt) ->
                  VS = F(S), VB = F(B),
                  io_lib:format("| ~s | " ++ Fmt ++ " | " ++ Fmt ++ " | ~s |~n",
                                [Name, VS, VB, ratio(VB, VS)])
          end,
    Text = fun(Name, F) -> io_lib:format("| ~s | ~s | ~s | |~n", [Name, F(S), F(B)]) end,
    Write = fun(K) -> fun(R) -> maps:get(K, maps:get(write_us, R), 0) / 1000 end end,
    Size = fun(K) -> fun(R) -> proplists:get_value(K, maps:get(sizes, R), 0) / 1024 end end,
    ["| | ", integer_to_list(maps:get(want, S)), " events | ", integer_to_list(maps:get(want, B)),
     " events | big / small |\n|---|--:|--:|--:|\n",
     Row("events recorded", fun(R) -> maps:get(events, R) end, "~b"),
     Row("of which through the ring", fun(R) -> maps:get(via_ring, R) end, "~b"),
     Row("traced for (s)", fun(R) -> maps:get(traced_s, R) end, "~.2f"),
     Row("events/s while traced", fun(R) -> round(maps:get(events, R) / maps:get(traced_s, R)) end,
         "~b"),
     Row("sink peak RSS (MiB)", fun(R) -> maps:get(hwm_kb, R) / 1024 end, "~.1f"),
     Row("end of work to files on disk (s)", fun(R) -> maps:get(files_s, R) end, "~.3f"),
     [Row(io_lib:format("write ~s (ms)", [K]), Write(K), "~.1f")
      || K <- kprof_opts:formats()],
     [Row(io_lib:format("~s size (KiB)", [K]), Size(K), "~.1f")
      || K <- kprof_opts:formats()],
     Row("ring drops", fun(R) -> maps:get(ring_drops, R) end, "~b"),
     Text("outcome", fun(R) -> io_lib:format("~0p", [maps:get(outcome, R)]) end),
     Text("alerts and warnings", fun(R) -> alerts_text(maps:get(alerts, R)) end)].

%% Alerts by kind (how many, and the first one's message), then how many
%% warnings were logged.
alerts_text([]) -> "none";
alerts_text(As) ->
    Kinds = lists:foldl(fun({alert, K, M}, Acc) ->
                                case lists:keyfind(K, 1, Acc) of
                                    {K, N, M0} -> lists:keystore(K, 1, Acc, {K, N + 1, M0});
                                    false -> Acc ++ [{K, 1, M}]
                                end;
                           (_, Acc) -> Acc
                        end, [], As),
    Logged = length([L || {L, _} <- As, L =/= alert]),
    escape(lists:join("; ", [io_lib:format("~s x~b (~ts)", [K, N, M]) || {K, N, M} <- Kinds]
                      ++ [io_lib:format("~b warnings logged", [Logged]) || Logged > 0])).

%% A table cell: no pipe, no newline, not too long.
escape(S) ->
    Flat = [case C of $| -> $/; $\n -> $\s; _ -> C end || C <- lists:flatten(S)],
    case length(Flat) > 200 of
        true -> lists:sublist(Flat, 197) ++ "...";
        false -> Flat
    end.

ratio(_, V) when V == 0 -> "-";
ratio(A, B) -> io_lib:format("~.2f", [A / B]).

%% Part 1's text (overhead_bench:write_section/3 adds the heading, date and
%% machine).
section(Table, [Small, Big], Tracer, Pause, Loads) ->
    MiB = maps:get(hwm_kb, Big) / 1024,
    Files = maps:get(files_s, Big),
    Traced = maps:get(traced_s, Small),
    Quiet = maps:get(alerts, Small) =:= [] andalso maps:get(outcome, Small) =:= ok,
    [io_lib:format("`make bench-flame`; load average before, between the two parts and after: "
                   "~s.~n~n", [lists:join(" / ", Loads)]),
     "### Big captures\n\n",
     io_lib:format("kprof:flame_apply/2 of a loop making 3 events an iteration (bench/"
                   "flame_bench.erl), two sizes side by side, each with a fresh sink, through "
                   "the ~s tracer (application env `{kprof, tracer}`); ~s. Peak RSS is the "
                   "sink's VmHWM; \"end of work to files\" runs from the traced fun's last "
                   "instruction to flame_apply/2 returning the four files. Alerts: "
                   "`{kprof_alert, ...}` from kprof:subscribe/0 and anything logged at warning "
                   "or above.~n~n",
                   [Tracer, case Pause of
                                0 -> "the loop never waits";
                                _ -> io_lib:format("the loop waits 1 ms every ~b iterations",
                                                   [Pause])
                            end]),
     Table, "\n",
     io_lib:format("Targets: ~b events traced in <= 1.5 s with no alert: ~.2f s, ~s (~s); ~b "
                   "events in a sink peak RSS <= 100 MB: ~.1f MiB (~s); files <= 2 s after the "
                   "capture: ~.3f s (~s).~n~n",
                   [maps:get(want, Small), Traced,
                    case Quiet of true -> "no alert"; false -> "alerted or aborted" end,
                    pass(Traced =< 1.5 andalso Quiet), maps:get(want, Big), MiB,
                    pass(MiB * 1.048576 =< 100), Files, pass(Files =< 2.0)])].

pass(true) -> "PASS";
pass(false) -> "FAIL".

%%% Part 2: end to end

modes() ->
    [untraced, {kprof, ring}, {kprof, port}, baseline].

mode_name(untraced) -> "untraced";
mode_name({kprof, ring}) -> "kprof, ring (default)";
mode_name({kprof, port}) -> "kprof, port tracer";
mode_name(baseline) -> "in-VM baseline (eflame's design)".

end_to_end(Work, Rounds, Dir) ->
    ok = kprof:start(),
    ok = kprof:subscribe(),
    Prev = application:get_env(kprof, tracer),
    Runs = [{Round, W, M, run(M, W, Dir)}
            || Round <- lists:seq(0, Rounds), W <- Work, M <- modes()],
    case Prev of
        {ok, T} -> application:set_env(kprof, tracer, T);
        undefined -> application:unset_env(kprof, tracer)
    end,
    ok = kprof:stop(),
    [R || R = {Round, _, _, _} <- Runs, Round > 0].   % round 0: the warm-up

work_fun({fib, N}) -> fun() -> flame_work:fib(N) end;
work_fun({wide, N}) -> fun() -> flame_work:wide(N) end.

%% #{ms, events, via_ring, outcome, alerts}
run(untraced, W, _Dir) ->
    F = work_fun(W),
    T0 = erlang:monotonic_time(microsecond),
    _ = F(),
    #{ms => (erlang:monotonic_time(microsecond) - T0) / 1000, events => 0, via_ring => 0,
      outcome => ok, alerts => []};
run({kprof, Tracer}, W, Dir) ->
    ok = application:set_env(kprof, tracer, Tracer),
    F = work_fun(W),
    S0 = kprof:sink_stats(),
    T0 = erlang:monotonic_time(microsecond),
    Outcome = kprof:flame_apply(F, #{output_format => folded, output_directory => Dir}),
    Ms = (erlang:monotonic_time(microsecond) - T0) / 1000,
    S1 = kprof:sink_stats(),
    Files = files_of(Outcome),
    OnDisk = Files =/= [] andalso lists:all(fun filelib:is_regular/1, Files),
    _ = [file:delete(File) || File <- Files],
    Alerts = alerts(kprof:status(), outcome(Outcome)),
    #{ms => Ms, events => delta(trace_events, S0, S1), via_ring => delta(ring_records, S0, S1),
      outcome => case OnDisk of true -> outcome(Outcome); false -> {no_files, outcome(Outcome)} end,
      alerts => Alerts};
run(baseline, W, Dir) ->
    F = work_fun(W),
    File = filename:join(Dir, "baseline.folded"),
    T0 = erlang:monotonic_time(microsecond),
    {ok, _, Events} = flame_baseline:apply(F, File),
    Ms = (erlang:monotonic_time(microsecond) - T0) / 1000,
    OnDisk = filelib:is_regular(File),
    ok = file:delete(File),
    #{ms => Ms, events => Events, via_ring => 0,
      outcome => case OnDisk of true -> ok; false -> no_files end, alerts => alerts()}.

median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).

%% {Workload, Mode} => {MedianMs, MinMs, MaxMs, MedianEvents, MedianViaRing, NotOk, Alerts}
summary(Runs, Work) ->
    maps:from_list(
      [{{W, M}, begin
                    Rs = [R || {_, W1, M1, R} <- Runs, W1 =:= W, M1 =:= M],
                    Ms = [maps:get(ms, R) || R <- Rs],
                    {median(Ms), lists:min(Ms), lists:max(Ms),
                     median([maps:get(events, R) || R <- Rs]),
                     median([maps:get(via_ring, R) || R <- Rs]),
                     [maps:get(outcome, R) || R <- Rs, maps:get(outcome, R) =/= ok],
                     lists:append([maps:get(alerts, R) || R <- Rs])}
                end}
       || W <- Work, M <- modes()]).

e2e_table(Runs, Work) ->
    Sum = summary(Runs, Work),
    Med = fun(W, M) -> element(1, maps:get({W, M}, Sum)) end,
    ["| workload | mode | median ms | min - max ms | events | through the ring | "
     "baseline / this | port / this | not ok | alerts |\n"
     "|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n",
     [begin
          {Median, Min, Max, Events, Ring, NotOk, Alerts} = maps:get({W, M}, Sum),
          Traced = M =/= untraced,
          io_lib:format("| ~s | ~s | ~.1f | ~.1f - ~.1f | ~s | ~s | ~s | ~s | ~s | ~s |~n",
                        [work_name(W), mode_name(M), Median, Min, Max,
                         if Traced -> integer_to_list(Events); true -> "-" end,
                         case M of {kprof, _} -> integer_to_list(Ring); _ -> "-" end,
                         if Traced -> ratio(Med(W, baseline), Median); true -> "-" end,
                         case M of {kprof, _} -> ratio(Med(W, {kprof, port}), Median);
                             _ -> "-" end,
                         outcomes_text(NotOk), alerts_text(Alerts)])
      end || W <- Work, M <- modes()]].

%% The runs that did not end with their file on disk, by outcome.
outcomes_text([]) -> "0";
outcomes_text(Os) ->
    escape([integer_to_list(length(Os)), ": ",
            lists:join(", ", [io_lib:format("~0p x~b", [O, length([X || X <- Os, X =:= O])])
                              || O <- lists:usort(Os)])]).

work_name({F, N}) -> io_lib:format("~s(~b)", [F, N]).

%% Each round's own ratio of two modes (they ran seconds apart: the same
%% load on both), median over the rounds.
paired(Runs, W, Num, Den) ->
    Of = fun(M) -> [{Round, maps:get(ms, R)} || {Round, W1, M1, R} <- Runs, W1 =:= W, M1 =:= M] end,
    median([N / D || {R1, N} <- Of(Num), {R2, D} <- Of(Den), R1 =:= R2]).

e2e_section(Table, Runs, Work, Rounds) ->
    Sum = summary(Runs, Work),
    Med = fun(W, M) -> element(1, maps:get({W, M}, Sum)) end,
    RingUsed = lists:all(fun(W) -> element(5, maps:get({W, {kprof, ring}}, Sum)) > 0 end, Work),
     ["### End to end: call to folded file\n\n",
      io_lib:format("Wall time from the call to the folded file on disk, for bench/flame_work.erl's "
                    "workloads: kprof:flame_apply(Fun, #{output_format => folded, "
                    "output_directory => Dir}) with `{kprof, tracer}` = `ring` and = `port` "
                    "(kprof started once before the rounds, as in a node that runs it), "
                    "bench/flame_baseline.erl (an Erlang process as the tracer, eflame's "
                    "design, writing the same folded lines), and the workload untraced. One "
                    "warm-up of each, then medians of ~b rounds, the modes interleaved in each "
                    "round. Events: what the sink (kprof) or the tracer process (baseline) "
                    "received; through the ring: the sink's ring_records. \"baseline / this\" "
                    "and \"port / this\": how many times faster than the baseline and than "
                    "kprof through the port. Not ok: runs that aborted or left no file.~n~n",
                    [Rounds]),
      Table, "\n",
      [io_lib:format("- ~s: kprof through the ring ~.2fx faster than the in-VM baseline (each "
                     "round's own ratio, median: ~.2fx), ~.2fx faster than through the port "
                     "(~.2fx).~n",
                     [work_name(W), Med(W, baseline) / Med(W, {kprof, ring}),
                      paired(Runs, W, baseline, {kprof, ring}),
                      Med(W, {kprof, port}) / Med(W, {kprof, ring}),
                      paired(Runs, W, {kprof, port}, {kprof, ring})])
       || W <- Work],
      case RingUsed of
          true -> "";
          false -> "- The ring rows saw no event through the ring: flame captures went through "
                   "the port tracer in this build.\n"
      end,
      "\n"].
