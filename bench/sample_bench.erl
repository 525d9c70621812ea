%%% @doc kprof:sample against perf and against tracing, on the real OTP
%%% workloads (erlang/test/kprof_real_work.erl: compile:file, xmerl_scan,
%%% digraph_utils): `make bench-sample', in a node started with `+JPperf
%%% map'. Not a test: figures, written to the "Sampling: kprof:sample
%%% against perf and tracing" section of bench/RESULTS.md.
%%%
%%% Per workload, a measurement is the time of Reps calls of it (Reps made
%%% so that the untraced calls take about a second), timed where the work
%%% runs (inside the sampled or traced fun), in one of these modes:
%%%
%%% ```
%%%  untraced        the calls
%%%  sample N        kprof_sample:apply/2 at N Hz over the calls, every
%%%                  process (pid => all), folded file and summary
%%%  perf N          perf record -g -e cpu-clock:u -F N -p <the node> over
%%%                  the calls (perf attached first)
%%%  flame_apply     kprof:flame_apply/2 of the calls, folded file
%%% '''
%%% Rounds interleave the modes, each round in another order; a mode's cost
%%% is the median over rounds of its time over the untraced time of the same
%%% round, for the node's CPU time (its threads', /proc/self/task/*/schedstat)
%%% and for the wall time. Per sampled measurement also: the samples, the share that ran C
%%% code with no Erlang frame, and the sink's CPU for the session (from
%%% /proc/Pid/schedstat, ns) per sample. Then, per workload, kprof:sample and
%%% perf at 997 Hz over the same calls (10 s): the Spearman rank
%%% correlation of their 30 functions with the most samples
%%% (kprof_sample_tests:spearman/3, names as perf gives them).
-module(sample_bench).
-export([main/1]).

-define(SECTION, "Sampling: kprof:sample against perf and tracing").
-define(RATES, [97, 499, 997]).

main([RoundsS, WorkS, Results, Replay]) ->
    Rounds = list_to_integer(RoundsS),
    Works = case WorkS of
                "all" -> kprof_real_work:names();
                _ -> [list_to_atom(W) || W <- string:split(WorkS, ",", all)]
            end,
    ok = kprof_sample:support(),
    ok = kprof:start(),
    {_, _} = kprof_sample:layout(),
    Perf = os:find_executable("perf"),
    Dir = filename:join("/tmp", "kprof-sample-bench-" ++ os:getpid()),
    ok = filelib:ensure_path(Dir),
    ok = file:change_mode(Dir, 8#700),
    Load0 = overhead_bench:load_average(),
    Rows = [workload(W, Rounds, Perf, Dir) || W <- Works],
    Kernel = kernel_cost(2 * Rounds + 1, Perf, Dir),
    PerSample = per_sample(Replay, Dir),
    Load1 = overhead_bench:load_average(),
    Text = [text(Rows, Rounds, Perf, Load0, Load1), Kernel, PerSample],
    io:put_chars(Text),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    _ = file:del_dir_r(Dir),
    _ = file:delete("/tmp/perf-" ++ os:getpid() ++ ".map"),
    halt(0).

modes(Perf) ->
    [untraced] ++ [{sample, Hz} || Hz <- ?RATES]
        ++ [{perf, Hz} || Perf =/= false, Hz <- ?RATES] ++ [flame].

workload(W, Rounds, Perf, Dir) ->
    Input = kprof_real_work:input(W, kprof_real_work:default_size(W)),
    _ = kprof_real_work:run(Input),   % code loaded, caches warm
    {T1, _} = timer:tc(fun() -> kprof_real_work:run(Input) end),
    Reps = max(1, 1000000 div max(1, T1)),
    Modes = modes(Perf),
    Runs = [{Round, M, measure(M, Input, Reps, Perf, Dir)}
            || Round <- lists:seq(1, Rounds), M <- rotate(Modes, Round)],
    Rank = rank(Input, Perf, Dir, W),
    #{work => W, label => kprof_real_work:label(W, kprof_real_work:default_size(W)),
      reps => Reps, runs => Runs, modes => Modes, rank => Rank}.

rotate(L, N) ->
    K = N rem length(L),
    lists:nthtail(K, L) ++ lists:sublist(L, K).

%% The calls, timed where they run: their wall time and the node's CPU time
%% (every thread of it), in us.
calls(Input, Reps) ->
    C0 = node_cpu_ns(),
    T0 = erlang:monotonic_time(microsecond),
    _ = [kprof_real_work:run(Input) || _ <- lists:seq(1, Reps)],
    {erlang:monotonic_time(microsecond) - T0, (node_cpu_ns() - C0) div 1000}.

%% The CPU time of every thread of this node so far, ns (/proc/self/task/*/schedstat:
%% what the kernel did in their name too, a sample's interrupt and callchain).
node_cpu_ns() ->
    lists:sum([schedstat_ns("/proc/self/task/" ++ T ++ "/schedstat")
               || T <- element(2, file:list_dir("/proc/self/task"))]).

schedstat_ns(Path) ->
    case file:read_file(Path) of
        {ok, B} -> list_to_integer(hd(string:split(string:trim(binary_to_list(B)), " ")));
        _ -> 0
    end.

measure(untraced, Input, Reps, _, _) ->
    {calls(Input, Reps), #{}};
measure({sample, Hz}, Input, Reps, _, Dir) ->
    Cpu0 = sink_cpu_ns(),
    Timed = fun() ->
                    C0 = sink_cpu_ns(),
                    T = calls(Input, Reps),
                    {T, sink_cpu_ns() - C0}
            end,
    {ok, {T, Drains}, [_], #{sample := S}} =
        quiet(fun() ->
                      kprof_sample:apply(Timed, #{pid => all, frequency => Hz,
                                                  output_directory => Dir,
                                                  output_format => folded, info => true})
              end),
    Cpu = sink_cpu_ns() - Cpu0,
    N = maps:get(samples, S),
    {T, #{samples => N, c_only => maps:get(c_only, S), sink_ns => Drains, session_ns => Cpu,
          lost => maps:get(lost, S)}};
measure({perf, Hz}, Input, Reps, Perf, Dir) ->
    Data = filename:join(Dir, "perf.data"),
    Port = perf(Perf, Hz, Data),
    T = calls(Input, Reps),
    stop_perf(Port),
    _ = file:delete(Data),
    {T, #{}};
measure(flame, Input, Reps, _, Dir) ->
    {ok, T, [_]} = kprof:flame_apply(fun() -> calls(Input, Reps) end,
                                      #{output_directory => Dir, output_format => folded,
                                        progress => false}),
    {T, #{}}.

perf(Perf, Hz, Data) ->
    Port = open_port({spawn_executable, Perf},
                     [{args, ["record", "-q", "-g", "-e", "cpu-clock:u", "-F", integer_to_list(Hz),
                              "-p", os:getpid(), "-o", Data]},
                      exit_status, stderr_to_stdout, binary]),
    timer:sleep(500),   % attached to every thread before the calls start
    Port.

stop_perf(Port) ->
    {os_pid, P} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(P)),
    receive {Port, {exit_status, _}} -> ok after 60000 -> ok end.

%% The sink's CPU time so far, ns (its one thread's schedstat).
sink_cpu_ns() ->
    {os_pid, P} = erlang:port_info(kprof_sink:port(), os_pid),
    schedstat_ns("/proc/" ++ integer_to_list(P) ++ "/schedstat").

%% kprof:sample and perf at 997 Hz over the same calls (10 s).
rank(_Input, false, _Dir, _W) ->
    skipped;
rank(Input, Perf, Dir, W) ->
    Data = filename:join(Dir, "rank.data"),
    Port = perf(Perf, 997, Data),
    Loop = spawn(fun() -> loop(Input) end),
    {ok, _, Rows} = quiet(fun() ->
                                  kprof:sample(10000, #{frequency => 997, output_directory => Dir,
                                                        output_format => folded, top => 100000})
                          end),
    exit(Loop, kill),
    stop_perf(Port),
    Theirs = kprof_sample_tests:perf_leaves(Perf, Data),
    _ = file:delete(Data),
    Ours = kprof_sample_tests:leaves_of(Rows),
    io:format("~p: Spearman ~.3f~n", [W, kprof_sample_tests:spearman(Ours, Theirs, 30)]),
    kprof_sample_tests:spearman(Ours, Theirs, 30).

loop(Input) ->
    _ = kprof_real_work:run(Input),
    loop(Input).

%% F's printing (the top table, the summary line) to nowhere.
quiet(F) ->
    Old = group_leader(),
    Null = spawn(fun null_io/0),
    group_leader(Null, self()),
    try F() after group_leader(Old, self()), exit(Null, kill) end.

null_io() ->
    receive
        {io_request, From, Ref, _} -> From ! {io_reply, Ref, ok}, null_io();
        _ -> null_io()
    end.

%%% What a sample costs the sampled thread

%% One process spinning a fixed number of iterations, its CPU time untraced
%% and sampled at 9973 Hz by kprof (and by perf), interleaved: the CPU a
%% sample costs the thread it interrupts (the timer interrupt, the callchain
%% walk, the ring), which a rate of N Hz costs N times a second. At 9973 Hz
%% the difference stands out of a loaded machine's noise; the workloads'
%% rows above cannot resolve a few per cent.
kernel_cost(Rounds, Perf, Dir) ->
    N = spin_size(),
    Modes = [untraced, {sample, 9973}] ++ [{perf, 9973} || Perf =/= false],
    Runs = [{R, M, spin_run(M, N, Perf, Dir)} || R <- lists:seq(1, Rounds), M <- rotate(Modes, R)],
    Base = median([Cpu || {_, untraced, {Cpu, _}} <- Runs]),
    Each = fun(M) ->
                   Ps = [{(Cpu - BaseR) / max(1, Samples), Cpu / max(1, BaseR)}
                         || {R, M1, {Cpu, Samples}} <- Runs, M1 =:= M,
                            {R2, untraced, {BaseR, _}} <- Runs, R2 =:= R],
                   {median([P || {P, _} <- Ps]), median([Q || {_, Q} <- Ps])}
           end,
    {KUs, KRatio} = Each({sample, 9973}),
    PerfLine = case Perf of
                   false -> "perf: SKIPPED";
                   _ -> {_, PRatio} = Each({perf, 9973}),
                        io_lib:format("perf record -g at 9973 Hz: ~.3fx", [PRatio])
               end,
    io_lib:format("~nWhat a sample costs the thread it interrupts: one process spinning ~b "
                  "iterations 100 calls deep (~b ms of CPU untraced), ~b rounds interleaved, the node's CPU "
                  "time: kprof:sample at 9973 Hz ~.3fx, ~.1f us of the thread's CPU a sample "
                  "(the median over rounds of the extra CPU over the samples); ~s. At 97, 499 "
                  "and 997 Hz that is ~.2f %, ~.1f % and ~.1f % of a busy thread's CPU.~n",
                  [N, round(Base / 1000), Rounds, KRatio, KUs, PerfLine,
                   97 * KUs / 1.0e4, 499 * KUs / 1.0e4, 997 * KUs / 1.0e4]).

%% Iterations for about 1 s of one thread's CPU.
spin_size() ->
    {Us, _} = timer:tc(fun() -> spin(10000000) end),
    10000000 * 1000000 div max(1, Us).

spin(0) -> ok;
spin(K) -> spin(K - 1).

%% The spin 100 calls deep: the kernel walks 100 frames a sample, as it does
%% on a real program's stacks.
deep(0, N) -> spin(N);
deep(D, N) -> deep(D - 1, N), ok.

%% {CPU us of the node while spinning, samples taken}.
spin_run(untraced, N, _, _) ->
    {element(2, spin_calls(N)), 0};
spin_run({sample, Hz}, N, _, Dir) ->
    {ok, {_, Cpu}, [_], #{sample := S}} =
        quiet(fun() ->
                      kprof_sample:apply(fun() -> spin_calls(N) end,
                                         #{pid => all, frequency => Hz, output_directory => Dir,
                                           output_format => folded, info => true})
              end),
    {Cpu, maps:get(samples, S)};
spin_run({perf, Hz}, N, Perf, Dir) ->
    Data = filename:join(Dir, "spin.data"),
    Port = perf(Perf, Hz, Data),
    {_, Cpu} = spin_calls(N),
    stop_perf(Port),
    _ = file:delete(Data),
    {Cpu, 0}.

spin_calls(N) ->
    C0 = node_cpu_ns(),
    T0 = erlang:monotonic_time(microsecond),
    deep(100, N),
    {erlang:monotonic_time(microsecond) - T0, (node_cpu_ns() - C0) div 1000}.

%%% The sink's work per sample, on a recorded session

%% compile:file sampled at 997 Hz for 3 s with raw_record, replayed by
%% bench/sample_replay.c: natively (5 rounds, ns) and under callgrind
%% (instructions; SKIPPED without valgrind).
per_sample(Replay, Dir) ->
    Rec = filename:join(Dir, "compile.ksr"),
    Input = kprof_real_work:input(compile, kprof_real_work:default_size(compile)),
    Loop = spawn(fun() -> loop(Input) end),
    {ok, _} = quiet(fun() ->
                            kprof:sample(3000, #{frequency => 997, raw_record => Rec,
                                                 output_directory => Dir, output_format => folded})
                    end),
    exit(Loop, kill),
    Native = os:cmd(Replay ++ " " ++ Rec ++ " 5"),
    NativeMap = os:cmd(Replay ++ " " ++ Rec ++ " 5 maponly"),
    Instr = case os:find_executable("valgrind") of
                false -> "SKIPPED (no valgrind)";
                VG -> callgrind(VG, Replay, Rec, Dir)
            end,
    io_lib:format("~nThe sink's work per sample (bench/sample_replay.c replaying a "
                  "recording of compile:file sampled at 997 Hz, every process): ~s under "
                  "callgrind. Natively, 5 rounds: ~s; of the map's reads alone: ~s. A live "
                  "drain adds the system calls that read the rings, the map and the VM's "
                  "memory.~n", [Instr, string:trim(Native), string:trim(NativeMap)]).

%% The instructions of the whole replay less those of its map reads alone.
callgrind(VG, Replay, Rec, Dir) ->
    {N, All} = instructions(VG, Replay, Rec, Dir, ""),
    {_, Map} = instructions(VG, Replay, Rec, Dir, " maponly"),
    io_lib:format("~b instructions a sample (~b in all less ~b for the perf map's reads, "
                  "over ~b samples)", [(All - Map) div max(1, N), All, Map, N]).

instructions(VG, Replay, Rec, Dir, Mode) ->
    Out = filename:join(Dir, "callgrind.out.replay"),
    Text = os:cmd(VG ++ " --tool=callgrind --callgrind-out-file=" ++ Out ++ " " ++ Replay ++
                      " " ++ Rec ++ " 1" ++ Mode ++ " 2>/dev/null"),
    {match, [N]} = re:run(Text, "samples=([0-9]+)", [{capture, [1], list}]),
    {ok, B} = file:read_file(Out),
    {match, [Ir]} = re:run(B, "\nsummary: ([0-9]+)", [{capture, [1], list}]),
    _ = file:delete(Out),
    {list_to_integer(N), list_to_integer(Ir)}.

%%% The table

text(Rows, Rounds, Perf, Load0, Load1) ->
    Modes = maps:get(modes, hd(Rows)),
    Head = ["| workload (measure) | untraced (ms) | " | [[mode_name(M), " | "] || M <- tl(Modes)]]
        ++ ["Spearman vs perf (997 Hz, top 30) |\n"],
    Sep = ["|---|--:|" | [["--:|"] || _ <- tl(Modes)]] ++ ["--:|\n"],
    Lines = [line(R) || R <- Rows],
    Detail = [detail(R) || R <- Rows],
    [Head, Sep, Lines, "\n",
     "| workload | rate | samples a second | C only (no Erlang frame) | sink CPU while sampling "
     "(ms a second) | sink CPU per sample while sampling (us) | sink CPU per session, start "
     "and files (ms) | lost |\n",
     "|---|--:|--:|--:|--:|--:|--:|--:|\n", Detail,
     io_lib:format("~nCost: the mode's time over the untraced time of the same round, median "
                   "of ~b rounds, modes interleaved (each round in another order); untraced: "
                   "the median time of the calls; CPU: the node's threads' time on a CPU while the "
                   "calls ran (/proc/self/task/*/schedstat: the kernel's work for a sample is "
                   "theirs too), wall: as the calls timed themselves. Samples a second: of the "
                   "node's CPU time. Sink CPU (/proc/Pid/schedstat): while the calls "
                   "ran, over the samples; and the session's whole (its start: the perf map "
                   "read, the events opened; its drains; its files), per session. ~s. Load average "
                   "(1 min) ~s at the start, ~s at the end.~n",
                   [Rounds, case Perf of false -> "perf: SKIPPED (not on the PATH)";
                                         _ -> "perf record -g -e cpu-clock:u -F N -p <node>"
                            end, Load0, Load1])].

mode_name({sample, Hz}) -> io_lib:format("sample ~b Hz", [Hz]);
mode_name({perf, Hz}) -> io_lib:format("perf ~b Hz", [Hz]);
mode_name(flame) -> "flame_apply (traced)";
mode_name(untraced) -> "untraced".

%% Two rows: the node's CPU time (what the work and the sampling cost its
%% threads, whatever else the machine runs), then the wall time.
line(R = #{rank := Rank}) ->
    [row(R, 2, "CPU", case Rank of skipped -> "SKIPPED"; _ -> io_lib:format("~.2f", [Rank]) end),
     row(R, 1, "wall", "")].

row(#{label := L, runs := Runs, modes := [untraced | Modes]}, E, What, Last) ->
    Base = fun(Round) -> hd([element(E, T) || {R, untraced, {T, _}} <- Runs, R =:= Round]) end,
    Ratio = fun(M) ->
                    median([element(E, T) / max(1, Base(R)) || {R, M1, {T, _}} <- Runs, M1 =:= M])
            end,
    Untraced = median([element(E, T) || {_, untraced, {T, _}} <- Runs]) / 1000,
    ["| ", L, " (", What, ") | ", io_lib:format("~.1f", [Untraced]), " | ",
     [[io_lib:format("~.3fx", [Ratio(M)]), " | "] || M <- Modes], Last, " |\n"].

detail(#{label := L, runs := Runs}) ->
    [begin
         Ex = [{T, E} || {_, {sample, H}, {T, E}} <- Runs, H =:= Hz],
         N = lists:sum([maps:get(samples, E) || {_, E} <- Ex]),
         C = lists:sum([maps:get(c_only, E) || {_, E} <- Ex]),
         Ns = lists:sum([maps:get(sink_ns, E) || {_, E} <- Ex]),
         Session = median([maps:get(session_ns, E) || {_, E} <- Ex]),
         Lost = lists:sum([maps:get(lost, E) || {_, E} <- Ex]),
         Secs = lists:sum([element(2, T) || {T, _} <- Ex]) / 1000000,
         Wall = lists:sum([element(1, T) || {T, _} <- Ex]) / 1000000,
         io_lib:format("| ~s | ~b Hz | ~b | ~.1f % | ~.1f | ~.1f | ~.1f | ~b |~n",
                       [L, Hz, round(N / max(Secs, 1.0e-9)), 100 * C / max(N, 1),
                        Ns / 1.0e6 / max(Wall, 1.0e-9), Ns / 1000 / max(N, 1),
                        Session / 1000000, Lost])
     end || Hz <- ?RATES].

median(L) ->
    S = lists:sort(L),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth(N div 2 + 1, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.
