%%% @doc What a flame capture's tracing costs the traced process, against
%%% the VM's own floor, with the pattern and flags kprof uses
%%% (`make bench-flame-vm').
%%%
%%% The workloads of bench/flame_real.erl, each run in a fresh process traced
%%% with kprof's flame flags (`[call, arity, return_to, running, procs,
%%% set_on_spawn]') and call pattern on every function, local, through:
%%% <ul>
%%% <li>`null': the null erl_tracer NIF (bench/null_tracer_nif.c): the VM's
%%%     dispatch floor for this pattern and these flags;</li>
%%% <li>`ring': the kprof_tracer NIF writing into a running sink's ring (the
%%%     sink reads and drops the events: no capture);</li>
%%% </ul>
%%% for the pattern kprof sets by default (match spec `true') and the one of
%%% `callers => true' (`[{'_', [], [{message, {caller}}]}]'), beside the
%%% workload untraced; rounds interleaved. Wall time and the VM's CPU time
%%% (statistics(runtime); the VM runs with +sbwt none so idle schedulers do
%%% not spin). Cost per event = (traced - untraced) / events, events counted
%%% from the ring. Target (issue 22): ring / null <= 1.2 with the same pattern.
%%% Prints a table and rewrites the "Flame: traced process" section of
%%% bench/RESULTS.md.
-module(flame_vm_bench).

-export([main/1]).

-define(FLAGS, [call, arity, return_to, running, procs, set_on_spawn]).

main([RoundsS, Results | Workloads]) ->
    Rounds = list_to_integer(RoundsS),
    ok = kprof:start(),
    Ring = kprof_sink:tracer(),
    Null = {tracer, null_tracer, []},
    true = null_tracer:loaded(),
    Ws = [list_to_atom(W) || W <- Workloads],
    Load0 = overhead_bench:load_average(),
    Rows = [row(W, Rounds, Ring, Null) || W <- Ws],
    Load1 = overhead_bench:load_average(),
    Text = text(Rows, Rounds, Load0, Load1),
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Flame: traced process", Text),
    halt(0).

%% Interleaved rounds of every mode on workload W.
row(W, Rounds, Ring, Null) ->
    F = flame_real:work(W),
    F(),
    Modes = [{untraced, none, none}, {null, true, Null}, {ring, true, Ring},
             {null, callers, Null}, {ring, callers, Ring}],
    Runs = [{M, P, run(F, P, T)} || _ <- lists:seq(1, Rounds), {M, P, T} <- Modes],
    Events = lists:max([E || {ring, true, {_, _, E}} <- Runs]),
    Med = fun(M, P, I) -> median([element(I, R) || {M1, P1, R} <- Runs, M1 =:= M, P1 =:= P]) end,
    {W, Events, [{M, P, Med(M, P, 1), Med(M, P, 2)} || {M, P, _} <- Modes],
     [{P, ratios(Runs, P)} || P <- [true, callers]]}.

%% Each round's own ratio (ring - untraced) / (null - untraced), wall and CPU.
ratios(Runs, P) ->
    U = [R || {untraced, _, R} <- Runs],
    N = [R || {null, P1, R} <- Runs, P1 =:= P],
    G = [R || {ring, P1, R} <- Runs, P1 =:= P],
    Per = fun(I) -> [(element(I, Ri) - element(I, Ui)) / max(1, element(I, Ni) - element(I, Ui))
                     || {Ui, Ni, Ri} <- lists:zip3(U, N, G)] end,
    {median(Per(1)), median(Per(2))}.

%% {WallMs, CpuMs, RingRecords}
run(F, none, none) ->
    {R0, _} = statistics(runtime),
    T0 = erlang:monotonic_time(microsecond),
    F(),
    T1 = erlang:monotonic_time(microsecond),
    {R1, _} = statistics(runtime),
    {(T1 - T0) / 1000, R1 - R0, 0};
run(F, Pattern, Tracer) ->
    Self = self(),
    P = spawn(fun() ->
                      receive go -> ok end,
                      {R0, _} = statistics(runtime),
                      T0 = erlang:monotonic_time(microsecond),
                      F(),
                      T1 = erlang:monotonic_time(microsecond),
                      {R1, _} = statistics(runtime),
                      Self ! {done, self(), (T1 - T0) / 1000, R1 - R0}
              end),
    MS = case Pattern of
             true -> true;
             callers -> [{'_', [], [{message, {caller}}]}]
         end,
    _ = erlang:trace_pattern({'_', '_', '_'}, MS, [local]),
    H0 = ring_head(),
    1 = erlang:trace(P, true, [Tracer | ?FLAGS]),
    P ! go,
    receive {done, P, Wall, Cpu} -> ok end,
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    _ = kprof:sink_sync(),
    {Wall, Cpu, (ring_head() - H0) div 48}.

%% The ring's bytes so far (records are 48 to 64 bytes: an estimate of events
%% only used to scale; the ratio needs none).
ring_head() ->
    case kprof_tracer:ring_info() of
        #{head := H} -> H;
        _ -> 0
    end.

median(L) ->
    lists:nth((length(L) + 1) div 2, lists:sort(L)).

text(Rows, Rounds, Load0, Load1) ->
    ["| workload | mode | pattern | wall ms | VM CPU ms |\n|---|---|---|--:|--:|\n",
     [[io_lib:format("| ~s | ~s | ~s | ~.1f | ~b |\n", [W, M, pat(P), Wall, Cpu])
       || {M, P, Wall, Cpu} <- Modes] || {W, _Events, Modes, _} <- Rows],
     io_lib:format("~nMedians of ~b interleaved rounds. Load average before / after: ~s / ~s.~n~n",
                   [Rounds, Load0, Load1]),
     [[io_lib:format("- ~s, pattern ~s: what the ring adds to the traced process over the null "
                     "tracer's floor, (ring - untraced) / (null - untraced), each round's own "
                     "ratio, median: wall ~.2fx, VM CPU ~.2fx (target <= 1.2x): **~s**~n",
                     [W, pat(P), RW, RC, pass(RC =< 1.2)])
       || {P, {RW, RC}} <- Ratios] || {W, _, _, Ratios} <- Rows]].

pat(none) -> "-";
pat(true) -> "true";
pat(callers) -> "{caller}".

pass(true) -> "PASS";
pass(false) -> "FAIL".
