%%% @doc What a trace event costs the traced process, tracer by tracer
%%% (`make bench-overhead', issue 6 benchmark 3).
%%%
%%% One worker process calls a traced function `Calls' times in a loop, with
%%% `[call, arity, monotonic_timestamp]' and a local pattern; the time of the
%%% loop, minus the untraced loop's, divided by `Calls', is the cost per event
%%% in the traced process. Tracers, side by side, interleaved over `Rounds':
%%%
%%% <ul>
%%% <li>`kprof_sink': a port to the sink as kprof opens it (1 MiB pipe);</li>
%%% <li>`kprof_sink 64k pipe': the same with the default pipe size, on a
%%%     tenth of the calls: the VM's port queue drains quadratically behind a
%%%     small pipe, so the full count takes minutes;</li>
%%% <li>`kprof_sink parallelism': the port opened with `{parallelism, true}';</li>
%%% <li>`kprof_tracer NIF ring': the tracer the tiers and flame captures use,
%%%     the kprof_tracer NIF writing each event into the sink's shared-memory
%%%     rings (16 MiB, one per scheduler thread);</li>
%%% <li>`null erl_tracer NIF': the VM's dispatch floor for any NIF tracer,
%%%     bench/null_tracer_nif.c (enabled/3 answers `trace', trace/5 `ok'): what
%%%     the VM spends to hand a NIF one event, before the NIF does anything;</li>
%%% <li>`process tracer': an Erlang process that receives and counts;</li>
%%% <li>`dbg ip': `dbg:trace_port(ip, {0, 50000})', no client (it drops);</li>
%%% <li>`dbg file': `dbg:trace_port(file, File)'.</li>
%%% </ul>
%%%
%%% Also: the time until the tracer has everything (for the sink, the reply
%%% to a `sync' sent after the loop). Medians. Target (issue 10): the ring's
%%% cost per event at most 1.2 times the null NIF's. Prints a table and
%%% rewrites the "Cost per event" section of bench/RESULTS.md. Not a test:
%%% nothing fails on a number.
-module(overhead_bench).
-export([main/1, f/1, run_mode/3, write_section/3, load_average/0]).

-define(FLAGS, [call, arity, monotonic_timestamp]).

%% The traced function.
f(X) -> X.

main([CallsS, RoundsS, Results]) ->
    Calls = list_to_integer(CallsS),
    Rounds = list_to_integer(RoundsS),
    {module, _} = code:ensure_loaded(?MODULE),
    {module, _} = code:ensure_loaded(null_tracer),   % thread_cpu_ns/0, for every mode
    Sink = filename:absname("erlang/priv/kprof_sink"),
    Modes = [untraced,
             {sink, "kprof_sink", [], []},
             {sink, "kprof_sink 64k pipe", ["--pipe-size", "65536"], []},
             {sink, "kprof_sink parallelism", [], [{parallelism, true}]},
             nif_ring, nif_null, process, dbg_ip, dbg_file],
    Load0 = load_average(),
    Runs = [{Round, mode_name(M), run(M, Sink, calls_of(M, Calls))}
            || Round <- lists:seq(1, Rounds), M <- Modes],
    Load1 = load_average(),
    Table = [summary(Name, [R || {_, N, R} <- Runs, N =:= Name]) || Name <- lists:usort(
                                                                    [mode_name(M) || M <- Modes])],
    Base = proplists:get_value("untraced", [{N, Loop} || {N, Loop, _, _} <- Table]),
    Lines = [line(N, Loop, Drain, MaxDrain, Base, calls_of(M, Calls), Calls)
             || {M, {N, Loop, Drain, MaxDrain}} <- lists:zip(Modes, order(Modes, Table))],
    Text = ["| tracer | loop (ms) | ns/event in the traced process | ns/event, its scheduler's "
            "CPU | until the tracer has all (ms) | slowest round's (ms) |\n",
            "|---|--:|--:|--:|--:|--:|\n", Lines,
            io_lib:format("~nMedians of ~b rounds of ~b calls each, modes interleaved; "
                          "flags ~w (the two NIF rows without monotonic_timestamp: a NIF "
                          "takes its own time, as kprof_tracer does), local pattern, match spec "
                          "[]. Untraced and with a tracer NIF the worker is bound to scheduler 1; "
                          "\"its scheduler's CPU\" is that thread's CPU time over the loop (the "
                          "time the traced process took, not the time other load took the core "
                          "from it). Load average before / after the rounds: ~s / ~s.~n",
                          [Rounds, Calls, ?FLAGS, Load0, Load1]),
            floor_target(Runs, Base, Calls)],
    io:format("~s", [Text]),
    write_section(Results, "Cost per event", Text),
    halt(0).

order(Modes, Table) ->
    [lists:keyfind(mode_name(M), 1, Table) || M <- Modes].

calls_of({sink, _, ["--pipe-size", "65536"], _}, Calls) -> Calls div 10;
calls_of(_, Calls) -> Calls.

mode_name(untraced) -> "untraced";
mode_name({sink, Name, _, _}) -> Name;
mode_name(nif_ring) -> "kprof_tracer NIF ring";
mode_name(nif_null) -> "null erl_tracer NIF (dispatch floor)";
mode_name(process) -> "process tracer";
mode_name(dbg_ip) -> "dbg ip (drops)";
mode_name(dbg_file) -> "dbg file".

%% The slowest drain too: behind a port the VM's queue now and then drains
%% in quadratic time (doc/guard.md), which a median hides. A mode without a CPU
%% column has undefined there (the median of them all is undefined).
summary(Name, Rs) ->
    {Name, {median([W || {{W, _}, _} <- Rs]), median([C || {{_, C}, _} <- Rs])},
     median([D || {_, D} <- Rs]), lists:max([D || {_, D} <- Rs])}.

%% The untraced loop ran all the calls; a mode run on fewer is compared pro rata.
line(Name, {Wall, Cpu}, Drain, MaxDrain, {BaseWall, BaseCpu}, Calls, AllCalls) ->
    Ns = fun(L, B) ->
                 case Name of
                     "untraced" -> "-";
                     _ when L =:= undefined -> "-";
                     _ -> io_lib:format("~b", [round(ns_per_event(L, B, Calls, AllCalls))])
                 end
         end,
    Note = case Calls of AllCalls -> ""; _ -> io_lib:format(" (~b calls)", [Calls]) end,
    io_lib:format("| ~s~s | ~.1f | ~s | ~s | ~.1f | ~.1f |~n",
                  [Name, Note, Wall, Ns(Wall, BaseWall), Ns(Cpu, BaseCpu), Drain, MaxDrain]).

median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).

%% What an event costs the traced process: the loop's time less the untraced
%% loop's (pro rata), per call, in ns.
ns_per_event(Loop, Base, Calls, AllCalls) ->
    (Loop - Base * Calls / AllCalls) * 1.0e6 / Calls.

%% The ring against the dispatch floor: the ratio of the medians in the table
%% (the target), and each round's own ratio (the modes of a round ran
%% seconds apart, so a round's ratio sees the same load on both).
floor_target(Runs, {BaseWall, BaseCpu}, Calls) ->
    [floor_ratio(Runs, Calls, "in the traced process (wall)", 1, BaseWall),
     floor_ratio(Runs, Calls, "on its scheduler's CPU", 2, BaseCpu)].

floor_ratio(Runs, Calls, What, Which, Base) ->
    Ring = mode_name(nif_ring),
    Null = mode_name(nif_null),
    Loops = fun(Name) -> [{R, element(Which, L)} || {R, N, {L, _}} <- Runs, N =:= Name] end,
    Ns = fun(L) -> ns_per_event(L, Base, Calls, Calls) end,
    RingNs = Ns(median([L || {_, L} <- Loops(Ring)])),
    NullNs = Ns(median([L || {_, L} <- Loops(Null)])),
    PerRound = [Ns(LR) / Ns(LN) || {R, LR} <- Loops(Ring), {R2, LN} <- Loops(Null), R =:= R2],
    Ratio = RingNs / NullNs,
    io_lib:format("~nThe ring against the VM's dispatch floor (the null NIF), ~s: ~b / ~b ns "
                  "per event = ~.2fx (target <= 1.2x): **~s**; each round's own ratio: ~s.~n",
                  [What, round(RingNs), round(NullNs), Ratio, pass(Ratio =< 1.2),
                   lists:join(", ", [io_lib:format("~.2f", [X]) || X <- PerRound])]).

pass(true) -> "PASS";
pass(false) -> "FAIL".

%% {{LoopMs, SchedulerCpuMs}, UntilDeliveredMs}
run_mode(M, S, C) -> run(M, S, C).

run(untraced, _Sink, Calls) ->
    {loop(undefined, Calls), 0.0};
run({sink, _Name, Args, PortOpts}, Sink, Calls) ->
    Port = open_port({spawn_executable, Sink},
                     [{args, Args}, binary, {packet, 4}, use_stdio, exit_status | PortOpts]),
    Loop = loop(Port, Calls),
    T0 = now_us(),
    #{trace_events := N} = sink_call(Port, stats),
    Calls = N,
    Drain = (now_us() - T0) / 1000,
    port_close(Port),
    {Loop, Drain};
run(nif_ring, Sink, Calls) ->
    Port = open_port({spawn_executable, Sink}, [binary, {packet, 4}, use_stdio, exit_status]),
    {Bytes, Rings} = kprof_tracer:rings(16 bsl 20),
    {ok, Name} = sink_call(Port, {ring_open, Bytes, Rings}),
    Gen = erlang:unique_integer([positive]),
    ok = kprof_tracer:attach(Name, Gen),
    ok = sink_call(Port, ring_unlink),
    %% A ring kprof uses is warm: kept for the sink's life, its pages mapped
    %% and its lines in use. A lap of untimed calls first, so the timed loop
    %% does not pay the first touch of 16 MiB of shared memory.
    Warm = (16 bsl 20) div 64 + 1000,
    _ = loop({kprof_tracer, Gen}, Warm),
    Loop = loop({kprof_tracer, Gen}, Calls),
    T0 = now_us(),
    #{trace_events := N, ring_drops := 0} = sink_call(Port, stats),   % reads the ring first
    Calls = N - Warm,
    Drain = (now_us() - T0) / 1000,
    ok = kprof_tracer:detach(),
    port_close(Port),
    {Loop, Drain};
run(nif_null, _Sink, Calls) ->
    {module, null_tracer} = code:ensure_loaded(null_tracer),
    {loop({null_tracer, []}, Calls), 0.0};
run(process, _Sink, Calls) ->
    Self = self(),
    Counter = spawn(fun() -> count(Self, Calls) end),
    Loop = loop(Counter, Calls),
    T0 = now_us(),
    receive {counted, Counter} -> ok after 120000 -> error(counter_timeout) end,
    {Loop, (now_us() - T0) / 1000};
run(dbg_ip, _Sink, Calls) ->
    Port = (dbg:trace_port(ip, {0, 50000}))(),
    Loop = loop(Port, Calls),
    _ = close(Port),
    {Loop, 0.0};
run(dbg_file, _Sink, Calls) ->
    File = filename:absname("_build/bench/overhead.trace"),
    ok = filelib:ensure_dir(File),
    Port = (dbg:trace_port(file, File))(),
    Loop = loop(Port, Calls),
    T0 = now_us(),
    _ = close(Port),   % the file driver writes what it holds on close
    Drain = (now_us() - T0) / 1000,
    _ = file:delete(File),
    {Loop, Drain}.

%% The 1, 5 and 15 minute load averages, for the benches' headers.
-spec load_average() -> string().
load_average() ->
    case file:read_file("/proc/loadavg") of
        {ok, L} -> lists:flatten(lists:join(" ", lists:sublist(string:lexemes(binary_to_list(L), " "), 3)));
        _ -> "?"
    end.

sink_call(Port, Cmd) ->
    Ref = make_ref(),
    port_command(Port, term_to_binary({kprof, Ref, Cmd})),
    receive {Port, {data, B}} -> {kprof_reply, Ref, R} = binary_to_term(B), R
    after 120000 -> error(sink_timeout)
    end.

count(Parent, 0) -> Parent ! {counted, self()};
count(Parent, N) -> receive {trace_ts, _, call, _, _} -> count(Parent, N - 1) end.

%% A port that may be gone already.
close(Port) ->
    try port_close(Port) catch error:badarg -> closed end.

%% The worker's own time for Calls traced calls, {WallMs, CpuMs}: the loop's
%% time, and, untraced or with a tracer NIF (the cost is all in the traced
%% process), its scheduler thread's CPU time: it is bound to scheduler 1
%% (undefined for the tracers whose work runs elsewhere: ports, processes).
loop(Tracer, Calls) ->
    Self = self(),
    Bound = Tracer =:= undefined orelse is_tuple(Tracer),
    W = spawn(fun() ->
                      _ = Bound andalso erlang:process_flag(scheduler, 1),
                      receive go -> ok end,   % scheduled in again: on scheduler 1
                      C0 = null_tracer:thread_cpu_ns(),
                      T0 = now_us(),
                      calls(Calls),
                      T1 = now_us(),
                      C1 = null_tracer:thread_cpu_ns(),
                      Self ! {looped, self(), T1 - T0, Bound andalso C1 - C0}
              end),
    case Tracer of
        undefined -> ok;
        {Module, State} ->
            %% A tracer NIF takes its own time (kprof's does; the VM's
            %% stamp, asked with monotonic_timestamp, would cost it as much
            %% again): the NIF rows run as kprof runs them, without it.
            1 = erlang:trace(W, true, [{tracer, Module, State} | ?FLAGS -- [monotonic_timestamp]]),
            1 = erlang:trace_pattern({?MODULE, f, 1}, [], [local]);
        _ ->
            1 = erlang:trace(W, true, [{tracer, Tracer} | ?FLAGS]),
            1 = erlang:trace_pattern({?MODULE, f, 1}, [], [local])
    end,
    W ! go,
    {Us, CpuNs} = receive {looped, W, T, C} -> {T, C} after 120000 -> error(loop_timeout) end,
    erlang:trace_pattern({?MODULE, f, 1}, false, [local]),
    {Us / 1000, case CpuNs of false -> undefined; _ -> CpuNs / 1.0e6 end}.

calls(0) -> ok;
calls(N) -> f(N), calls(N - 1).

now_us() -> erlang:monotonic_time(microsecond).

%% Replaces (or appends) "## Title" ... up to the next "## " in the results file.
write_section(File, Title, Body) ->
    Old = case file:read_file(File) of {ok, B} -> binary_to_list(B); _ -> "# kprof benchmark results\n" end,
    Head = "## " ++ Title,
    Stamp = io_lib:format("~s~n~nMeasured ~s on ~s (~b cores, OTP ~s).~n~n",
                          [Head, calendar:system_time_to_rfc3339(erlang:system_time(second)),
                           cpu_model(), erlang:system_info(logical_processors),
                           erlang:system_info(otp_release)]),
    New = lists:flatten([Stamp, Body]),
    Out = case string:find(Old, Head) of
              nomatch -> Old ++ "\n" ++ New;
              Rest ->
                  Before = string:slice(Old, 0, length(Old) - length(Rest)),
                  After = case string:find(string:slice(Rest, length(Head)), "\n## ") of
                              nomatch -> "";
                              Tail -> string:slice(Tail, 1)
                          end,
                  Before ++ New ++ "\n" ++ After
          end,
    ok = file:write_file(File, Out).

cpu_model() ->
    case file:read_file("/proc/cpuinfo") of
        {ok, B} ->
            case re:run(B, "model name\\s*:\\s*(.*)", [{capture, all_but_first, list}]) of
                {match, [M]} -> M;
                _ -> "unknown CPU"
            end;
        _ -> "unknown CPU"
    end.
