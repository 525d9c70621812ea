%%% @doc kprof's flame_apply against eprof, fprof, eflame and eflambe on real
%%% OTP workloads (erlang/test/kprof_real_work.erl: compile:file,
%%% xmerl_scan:string, digraph_utils), side by side in one run: `make bench-real' (part of
%%% `make bench'). Not a test: figures, written to the "Flame on real
%%% workloads" section of bench/RESULTS.md.
%%%
%%% Every run is a VM of its own (this module's child/1), so that no tool
%%% inherits another's patterns, heap or mailbox, and a tool that runs away
%%% is bounded without taking the bench with it: the child is killed past
%%% `Timeout' seconds or once its resident memory passes `MaxMB' (polled
%%% every 100 ms from /proc), and the row says so. The child makes the
%%% workload's input, runs the workload once untraced (code loaded, caches
%%% warm), then times one call of the tool:
%%%
%%% ```
%%%  untraced  the workload
%%%  kprof     kprof:flame_apply(W, #{children => true, top => 20,
%%%            output_directory => Dir}): the four formats and the table
%%%            (kprof started before the clock, as on a node that runs it)
%%%  eprof     eprof:profile([], W, {'_','_','_'}), eprof:log(File),
%%%            eprof:analyze(total)
%%%  fprof     fprof:apply(W, [], [{file, Trace}]), fprof:profile/1,
%%%            fprof:analyse([{dest, File}])
%%%  eflame    eflame:apply(normal_with_children, File, W, [])
%%%  eflambe   eflambe:apply({W, []}, [{output_directory, Dir},
%%%            {return, filename}]) (brendan_gregg, its default)
%%% '''
%%% All of them follow the processes the call spawns (compile:file does
%%% its work in one). Measured per run: wall time from the call to the files
%%% on disk; the traced call's own time (the workload timed inside the
%%% traced fun); the VM's CPU and, for kprof, the sink's (utime + stime from
%%% /proc); the VM's and the sink's peak resident memory (VmHWM); the
%%% files' size; the 1-minute load average when the run started. Rows give
%%% medians over the runs that ended with their files; ratios are to
%%% eprof's median on the same workload.
%%%
%%% eflame, eflambe and meck are not in this repository: they are looked
%%% for in `Peers' (the KPROF_PEERS directory: Peers/eflame/ebin,
%%% Peers/eflambe/ebin, and meck in Peers/meck/ebin or OTP's lib, as
%%% Debian's erlang-meck installs it); a peer that is not there is reported
%%% SKIPPED, not run, not hidden.
-module(real_bench).
-export([main/1, child/1]).

-define(TAG, "REAL_BENCH_RESULT ").
-define(PID_TAG, "REAL_BENCH_PID ").
-define(POLL_MS, 100).
-define(TOP, 20).
-define(SECTION, "Flame on real workloads: kprof, eprof, fprof, eflame, eflambe").

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% The coordinator

%% make bench-real: [Runs, TimeoutS, MaxMB, Peers, Workloads, Results];
%% Workloads is "all" or a comma-separated list of kprof_real_work:names().
main([RunsS, TimeoutS, MaxMBS, Peers, WorkS, Results]) ->
    Runs = list_to_integer(RunsS),
    Timeout = list_to_integer(TimeoutS) * 1000,
    MaxKB = list_to_integer(MaxMBS) * 1024,
    Works = case WorkS of
                "all" -> kprof_real_work:names();
                _ -> [W || W <- kprof_real_work:names(),
                           lists:member(atom_to_list(W), string:lexemes(WorkS, ","))]
            end,
    {Tools, Skipped} = available(Peers),
    _ = [io:format("bench-real: ~s SKIPPED: ~s~n", [T, Why]) || {T, Why} <- Skipped],
    Load0 = overhead_bench:load_average(),
    io:format("bench-real: ~b run(s) of ~p on ~p; timeout ~b s, memory cap ~b MB; load ~s~n",
              [Runs, Tools, Works, Timeout div 1000, MaxKB div 1024, Load0]),
    Dir = filename:absname("_build/bench/real"),
    ok = filelib:ensure_path(Dir),
    Env = #{timeout => Timeout, max_kb => MaxKB, peers => Peers, dir => Dir},
    All = lists:append(
            [[{{W, T}, run_one(W, T, R, Env)} || W <- Works, T <- Tools]
             || R <- lists:seq(1, Runs)]),
    Load1 = overhead_bench:load_average(),
    Rows = [{W, T, [Res || {{W1, T1}, Res} <- All, W1 =:= W, T1 =:= T]}
            || W <- Works, T <- Tools],
    Text = report(Rows, Runs, Env, Skipped, Load0, Load1),
    io:format("~n~s~n", [Text]),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

%% The tools whose code is there, and why the others are not run.
available(Peers) ->
    Has = fun(App) -> filelib:is_regular(filename:join([Peers, App, "ebin", App ++ ".beam"])) end,
    Meck = Has("meck") orelse code:which(meck) =/= non_existing,
    Peer = [{eflame, Has("eflame"), "eflame not found in " ++ Peers ++ "/eflame/ebin"},
            {eflambe, Has("eflambe") andalso Meck,
             case Has("eflambe") of
                 false -> "eflambe not found in " ++ Peers ++ "/eflambe/ebin";
                 true -> "meck (eflambe's dependency) is in neither " ++ Peers ++
                             "/meck/ebin nor OTP's lib (apt-get install erlang-meck)"
             end}],
    {[untraced, kprof, eprof, fprof] ++ [T || {T, true, _} <- Peer],
     [{T, Why} || {T, false, Why} <- Peer]}.

%% One child VM: its result map, or why it has none.
run_one(Work, Tool, Round, #{timeout := Timeout, max_kb := MaxKB, peers := Peers, dir := Dir}) ->
    Out = filename:join(Dir, io_lib:format("~s-~s-~b", [Work, Tool, Round])),
    _ = file:del_dir_r(Out),
    ok = filelib:ensure_path(Out),
    Load = load1(),
    PeerPa = lists:append([["-pa", filename:join([Peers, A, "ebin"])]
                           || A <- ["eflame", "eflambe", "meck"]]),
    Args = ["-noshell", "+sbwt", "none", "-pa", "erlang/ebin", "-pa", "_build/bench" | PeerPa]
        ++ ["-eval", lists:flatten(io_lib:format("real_bench:child([~p, ~p, ~p])",
                                                [atom_to_list(Tool), atom_to_list(Work), Out]))],
    Port = open_port({spawn_executable, os:find_executable("erl")},
                     [{args, Args}, exit_status, {line, 65536}, stderr_to_stdout]),
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    R = watch(Port, undefined, 0, Deadline, MaxKB, []),
    _ = file:del_dir_r(Out),
    Res = R#{load => Load},
    io:format("bench-real: round ~b ~s ~s: ~s~n", [Round, Work, Tool, brief(Res)]),
    Res.

%% Reads the child's lines until its result and exit; every POLL_MS its
%% peak memory (VmHWM) is read, and past MaxKB or the deadline it is killed.
watch(Port, OsPid, Peak, Deadline, MaxKB, Res) ->
    receive
        {Port, {data, {eol, ?PID_TAG ++ P}}} ->
            watch(Port, list_to_integer(P), Peak, Deadline, MaxKB, Res);
        {Port, {data, {eol, ?TAG ++ Term}}} ->
            Map = case erl_scan:string(Term) of
                      {ok, Toks, _} ->
                          case erl_parse:parse_term(Toks) of
                              {ok, M} -> M;
                              Bad -> #{outcome => {bad_result_line, Bad}}
                          end;
                      Bad -> #{outcome => {bad_result_line, Bad}}
                  end,
            watch(Port, OsPid, Peak, Deadline, MaxKB, Map);
        {Port, {data, _Line}} ->
            watch(Port, OsPid, Peak, Deadline, MaxKB, Res);
        {Port, {exit_status, 0}} when is_map(Res) ->
            Res;
        {Port, {exit_status, St}} when is_map(Res) ->
            Res#{outcome => {exit, St}};
        {Port, {exit_status, St}} ->
            #{outcome => {exit, St}, vm_hwm_kb => Peak}
    after ?POLL_MS ->
            Peak1 = max(Peak, proc_kb(OsPid, "VmHWM:")),
            Now = erlang:monotonic_time(millisecond),
            if
                Peak1 > MaxKB -> kill(Port, OsPid, #{outcome => {memory_cap, MaxKB div 1024},
                                                     vm_hwm_kb => Peak1});
                Now > Deadline -> kill(Port, OsPid, #{outcome => timeout, vm_hwm_kb => Peak1});
                true -> watch(Port, OsPid, Peak1, Deadline, MaxKB, Res)
            end
    end.

kill(Port, OsPid, Res) ->
    _ = is_integer(OsPid) andalso os:cmd("kill -9 " ++ integer_to_list(OsPid)),
    receive
        {Port, {exit_status, _}} -> ok
    after 10000 ->
        try port_close(Port) catch error:badarg -> true end  % closed meanwhile
    end,
    flush(Port),
    Res.

flush(Port) ->
    receive {Port, _} -> flush(Port) after 0 -> ok end.

brief(#{outcome := ok, wall_us := W, traced_us := T}) ->
    io_lib:format("~.1f ms to files, traced call ~.1f ms", [W / 1000, T / 1000]);
brief(#{outcome := O}) ->
    io_lib:format("~p", [O]).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% The table

report(Rows, Runs, Env = #{timeout := Timeout, max_kb := MaxKB}, Skipped, Load0, Load1) ->
    Head = io_lib:format(
             "`make bench-real` (part of `make bench`), kprof at ~s; load average before / after: "
             "~s / ~s.~n~n"
             "bench/real_bench.erl: each run a VM of its own (`+sbwt none`), killed past ~b s "
             "or ~b MB of resident memory; the workload made and run once untraced first; then "
             "one call of the tool. ~b round(s), the tools interleaved in each. \"to files\": "
             "from the call to the files on disk; \"traced call\": the workload's own time, "
             "timed inside the traced fun; CPU: utime + stime from /proc (VM; sink: kprof's "
             "kprof_sink process); peak: VmHWM. Medians of the runs that ended with their "
             "files; \"/ eprof\": this tool's median over eprof's, same workload. "
             "kprof: `flame_apply(W, #{children => true, top => 20})`, all four formats; "
             "eprof: `profile([], W, {'_','_','_'})` then `analyze(total)` to a log file; "
             "fprof: `apply/3` to a trace file, `profile/1`, `analyse/1` to a file; "
             "eflame: `apply(normal_with_children, File, W, [])`; eflambe: "
             "`apply({W, []}, [{output_directory, Dir}, {return, filename}])`.~n~n",
             [commit(), Load0, Load1, Timeout div 1000, MaxKB div 1024, Runs]),
    Skips = [io_lib:format("- ~s: SKIPPED (~s)~n", [T, Why]) || {T, Why} <- Skipped]
        ++ [io_lib:format("- ~s: ~s~n", [A, Where]) || {A, Where} <- peer_versions(Env)],
    Table = ["| workload | tool | to files ms | min - max | traced call ms | VM CPU ms "
             "| sink CPU ms | VM peak MB | sink peak MB | files MB | to files / eprof "
             "| traced / eprof | ok | not ok | load 1 min |\n"
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|\n"
             | [row(W, T, Rs, eprof_of(W, Rows)) || {W, T, Rs} <- Rows]],
    [Head, Skips, if Skips =:= [] -> ""; true -> "\n" end, Table].

%% The checkout's commit (and whether it had changes), or "?" outside git.
commit() ->
    case string:trim(os:cmd("git rev-parse --short HEAD 2>/dev/null")) of
        "" -> "?";
        C -> case string:trim(os:cmd("git status --porcelain --untracked-files=no 2>/dev/null")) of
                 "" -> C;
                 _ -> C ++ " (with changes)"
             end
    end.

%% Where each peer's code was found, and its version (its .app file's vsn).
peer_versions(#{peers := Peers}) ->
    [{A, Where} || A <- ["eflame", "eflambe", "meck"],
                   Where <- [where(A, filename:join([Peers, A, "ebin"]))], Where =/= none].

where(A, Ebin) ->
    Dir = case filelib:is_regular(filename:join(Ebin, A ++ ".beam")) of
              true -> Ebin;
              false -> case code:which(list_to_atom(A)) of
                           F when is_list(F) -> filename:dirname(F);
                           _ -> none
                       end
          end,
    case Dir of
        none -> none;
        _ -> Vsn = case file:consult(filename:join(Dir, A ++ ".app")) of
                       {ok, [{application, _, Props}]} -> proplists:get_value(vsn, Props, "?");
                       _ -> "?"
                   end,
             io_lib:format("~s (vsn ~s), built outside the repository", [Dir, Vsn])
    end.

eprof_of(W, Rows) ->
    case [Rs || {W1, eprof, Rs} <- Rows, W1 =:= W] of
        [Rs] -> ok_runs(Rs);
        [] -> []
    end.

ok_runs(Rs) -> [R || R = #{outcome := ok} <- Rs].

row(W, T, Rs, Eprof) ->
    Ok = ok_runs(Rs),
    Bad = [maps:get(outcome, R) || R <- Rs, maps:get(outcome, R) =/= ok],
    M = fun(K) -> median([maps:get(K, R) || R <- Ok, is_number(maps:get(K, R, undefined))]) end,
    Ms = fun(K) -> num(M(K), 1000, 1) end,
    MB = fun(K) -> num(M(K), 1024, 1) end,
    Walls = [maps:get(wall_us, R) || R <- Ok],
    Range = case Walls of
                [] -> "-";
                _ -> io_lib:format("~.1f - ~.1f",
                                   [lists:min(Walls) / 1000, lists:max(Walls) / 1000])
            end,
    Ratio = fun(K) ->
                    case {M(K), median([maps:get(K, R) || R <- Eprof])} of
                        {A, B} when is_number(A), is_number(B), B > 0 ->
                            io_lib:format("~.2f", [A / B]);
                        _ -> "-"
                    end
            end,
    %% What a run that did not end with files ended with: a peak at the kill.
    BadText = case Bad of
                  [] -> "0";
                  _ -> io_lib:format("~b (~s)", [length(Bad), bad_text(Bad)])
              end,
    PeakAll = median([maps:get(vm_hwm_kb, R)
                      || R <- Rs, is_number(maps:get(vm_hwm_kb, R, undefined))]),
    VmPeak = case Ok of
                 [] -> num(PeakAll, 1024, 0) ++ " (at the end)";
                 _ -> MB(vm_hwm_kb)
             end,
    Loads = [maps:get(load, R) || R <- Rs],
    io_lib:format("| ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~b | ~s | ~s |~n",
                  [kprof_real_work:label(W, kprof_real_work:default_size(W)), name(T),
                   Ms(wall_us), Range,
                   Ms(traced_us), num(M(vm_cpu_ms), 1, 0), num(M(sink_cpu_ms), 1, 0), VmPeak,
                   MB(sink_hwm_kb), num(M(files_bytes), 1048576, 2), Ratio(wall_us),
                   Ratio(traced_us), length(Ok), BadText,
                   io_lib:format("~.1f - ~.1f", [lists:min(Loads), lists:max(Loads)])]).

bad_text(Bad) ->
    lists:join(", ", [outcome_text(O) || O <- lists:usort(Bad)]).

outcome_text(timeout) -> "timeout";
outcome_text({memory_cap, MB}) -> io_lib:format("killed at the ~b MB cap", [MB]);
outcome_text({exit, St}) -> io_lib:format("VM exit ~p", [St]);
outcome_text({error, E}) -> io_lib:format("~0p", [E]);
outcome_text(O) -> io_lib:format("~0p", [O]).

name(kprof) -> "kprof flame_apply";
name(T) -> atom_to_list(T).

num(undefined, _Div, _D) -> "-";
num(V, Div, 0) -> integer_to_list(round(V / Div));
num(V, Div, D) -> float_to_list(V / Div, [{decimals, D}]).

median([]) -> undefined;
median(L) ->
    S = lists:sort(L),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth((N + 1) div 2, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.

load1() ->
    [L | _] = string:lexemes(overhead_bench:load_average(), " "),
    list_to_float(L).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% A child VM: one tool, one workload, one call

child([ToolS, WorkS, Out]) ->
    io:format("~s~s~n", [?PID_TAG, os:getpid()]),
    logger:set_primary_config(level, warning),
    Tool = list_to_atom(ToolS),
    Work = list_to_atom(WorkS),
    Input = kprof_real_work:input(Work, kprof_real_work:default_size(Work)),
    _ = kprof_real_work:run(Input),
    ets:new(real_bench, [public, named_table]),
    Fun = fun() ->
                  T0 = erlang:monotonic_time(microsecond),
                  R = kprof_real_work:run(Input),
                  ets:insert(real_bench, {traced_us, erlang:monotonic_time(microsecond) - T0}),
                  R
          end,
    Sink = prepare(Tool),
    Self = os:getpid(),
    Cpu0 = cpu_ms(Self),
    SinkCpu0 = cpu_ms(Sink),
    T0 = erlang:monotonic_time(microsecond),
    Outcome = try tool(Tool, Fun, Out) of
                  ok -> ok;
                  Other -> {error, Other}
              catch
                  C:E -> {error, {C, E}}
              end,
    Wall = erlang:monotonic_time(microsecond) - T0,
    Res = #{outcome => Outcome, wall_us => Wall,
            traced_us => case ets:lookup(real_bench, traced_us) of
                             [{_, Us}] -> Us;
                             [] -> undefined
                         end,
            vm_cpu_ms => cpu_ms(Self) - Cpu0,
            sink_cpu_ms => case Sink of
                               undefined -> undefined;
                               _ -> cpu_ms(Sink) - SinkCpu0
                           end,
            vm_hwm_kb => proc_kb(Self, "VmHWM:"),
            sink_hwm_kb => case Sink of
                               undefined -> undefined;
                               _ -> proc_kb(Sink, "VmHWM:")
                           end,
            files_bytes => lists:sum([filelib:file_size(F)
                                      || F <- filelib:wildcard(filename:join(Out, "*"))])},
    io:format("~s~0p.~n", [?TAG, Res]),
    halt(0).

%% kprof started before the clock (its sink's OS pid, for its CPU and memory).
prepare(kprof) ->
    ok = kprof:start(),
    {os_pid, P} = erlang:port_info(kprof:sink_port(), os_pid),
    integer_to_list(P);
prepare(eprof) ->
    {ok, _} = eprof:start(),
    undefined;
prepare(_) ->
    undefined.

%% One call of the tool, to its files in Out; ok or what went wrong.
tool(untraced, Fun, _Out) ->
    _ = Fun(),
    ok;
tool(kprof, Fun, Out) ->
    case kprof:flame_apply(Fun, #{children => true, top => ?TOP, output_directory => Out}) of
        {ok, _, [_ | _], _Top} -> ok;
        Other -> Other
    end;
tool(eprof, Fun, Out) ->
    case eprof:profile([], Fun, {'_', '_', '_'}) of
        {ok, _} ->
            ok = eprof:log(filename:join(Out, "eprof.txt")),
            ok = eprof:analyze(total),
            stopped = eprof:stop(),
            ok;
        Other ->
            Other
    end;
tool(fprof, Fun, Out) ->
    Trace = filename:join(Out, "fprof.trace"),
    _ = fprof:apply(Fun, [], [{file, Trace}]),
    ok = fprof:profile([{file, Trace}]),
    ok = fprof:analyse([{dest, filename:join(Out, "fprof.analysis")}]),
    ok = fprof:stop(),
    ok;
tool(eflame, Fun, Out) ->
    %% eflame returns the function's result, or crashes when its tracer
    %% does not hand over the stacks within its 5 s ({error, timeout}).
    _ = eflame:apply(normal_with_children, filename:join(Out, "stacks.out"), Fun, []),
    ok;
tool(eflambe, Fun, Out) ->
    File = eflambe:apply({Fun, []}, [{output_directory, Out}, {return, filename}]),
    true = filelib:is_regular(File),
    ok.

%% utime + stime of an OS process, in ms (clock ticks of 10 ms).
cpu_ms(undefined) ->
    undefined;
cpu_ms(Pid) ->
    case file:read_file("/proc/" ++ Pid ++ "/stat") of
        {ok, B} ->
            %% Fields after the command's closing parenthesis: 14 and 15 of the line.
            [_, After] = string:split(binary_to_list(B), ") ", trailing),
            Fs = string:lexemes(After, " "),
            (list_to_integer(lists:nth(12, Fs)) + list_to_integer(lists:nth(13, Fs))) * 10;
        _ ->
            undefined
    end.

%% A `Key: N kB' line of /proc/Pid/status; 0 when there is none.
proc_kb(undefined, _Key) ->
    0;
proc_kb(Pid, Key) when is_integer(Pid) ->
    proc_kb(integer_to_list(Pid), Key);
proc_kb(Pid, Key) ->
    case file:read_file("/proc/" ++ Pid ++ "/status") of
        {ok, B} ->
            case [L || L <- string:lexemes(binary_to_list(B), "\n"), lists:prefix(Key, L)] of
                [Line] -> list_to_integer(lists:nth(2, string:lexemes(Line, " \t")));
                _ -> 0
            end;
        _ ->
            0
    end.
