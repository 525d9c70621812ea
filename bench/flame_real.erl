%%% @doc Real OTP workloads for the flame benchmarks (`make bench-stacks',
%%% `make bench-flame-real'), and the recorder of their trace streams.
%%%
%%% <ul>
%%% <li>`compile': `compile:file/2' of erlang/src/kprof_tiers.erl (binary, in
%%%     memory): the compiler's passes, ~6 M calls of ~37 ns;</li>
%%% <li>`xmerl': `xmerl_scan:string/1' of a 60 KB XML document made from
%%%     bench/RESULTS.md's text: a scanner's mutual tail recursion;</li>
%%% <li>`digraph': a random digraph of 3000 vertices and 12000 edges, its strong
%%%     components, topological sort and reachability (digraph, digraph_utils:
%%%     ets tables and list recursion).</li>
%%% <li>`server' (stack_quality only): a gen_server answering 3000 calls, each a
%%%     small sort: a server's loop that never returns.</li>
%%% </ul>
%%% `record(Workload, File)' runs one traced with a port tracer into a file
%%% (dbg's file trace port: every event, the VM's own format), with kprof's
%%% flags and the call pattern `[{'_', [], [{message, {caller}}]}]', so the
%%% stream holds both what the flow rules read (calls, return_tos) and the
%%% callers the search rules need: bench/stack_quality.c compares the two.
-module(flame_real).

-export([work/1, workloads/0, record/2, main/1, run_bench/1]).
%% The server workload's gen_server.
-export([init/1, handle_call/3, handle_cast/2]).

-define(FLAGS, [call, arity, return_to, running, procs, monotonic_timestamp, set_on_spawn]).

%% @doc The workloads' names.
-spec workloads() -> [atom()].
workloads() ->
    [compile, xmerl, digraph].

%% @doc A workload as a fun of no argument, set up (its input made) now.
-spec work(atom()) -> fun(() -> ok).
work(compile) ->
    Src = filename:absname("erlang/src/kprof_tiers.erl"),
    Inc = filename:absname("erlang/include"),
    fun() -> {ok, _, _} = compile:file(Src, [binary, {i, Inc}]), ok end;
work(xmerl) ->
    {ok, Text} = file:read_file(filename:absname("bench/RESULTS.md")),
    Escaped = lists:foldl(fun({F, T}, B) -> binary:replace(B, F, T, [global]) end, Text,
                          [{<<"&">>, <<"&amp;">>}, {<<"<">>, <<"&lt;">>}, {<<">">>, <<"&gt;">>}]),
    Part = binary:part(Escaped, 0, min(15000, byte_size(Escaped))),
    Xml = binary_to_list(iolist_to_binary(
                           ["<doc>", [["<p n=\"", integer_to_list(I), "\">", Part, "</p>"]
                                      || I <- lists:seq(1, 4)], "</doc>"])),
    fun() -> {_, []} = xmerl_scan:string(Xml), ok end;
work(server) ->
    fun() ->
            {ok, S} = gen_server:start_link(?MODULE, [], []),
            _ = [gen_server:call(S, {sort, I}) || I <- lists:seq(1, 3000)],
            ok = gen_server:stop(S)
    end;
work(digraph) ->
    fun() ->
            rand:seed(exsss, {1, 2, 3}),
            N = 3000,
            G = digraph:new(),
            Vs = [digraph:add_vertex(G, I) || I <- lists:seq(1, N)],
            _ = [digraph:add_edge(G, rand:uniform(N), rand:uniform(N)) || _ <- lists:seq(1, 4 * N)],
            _ = digraph_utils:strong_components(G),
            _ = digraph_utils:topsort(G),
            _ = digraph_utils:reachable(lists:sublist(Vs, 10), G),
            _ = digraph_utils:cyclic_strong_components(G),
            true = digraph:delete(G),
            ok
    end.

%% @doc Records `Workload' traced (see the module doc) into `File'; returns
%% the workload's traced wall time in ms.
-spec record(atom(), file:filename()) -> float().
record(Workload, File) ->
    F = work(Workload),
    F(),
    Self = self(),
    P = spawn(fun() ->
                      receive go -> ok end,
                      T0 = erlang:monotonic_time(microsecond),
                      F(),
                      Self ! {done, self(), erlang:monotonic_time(microsecond) - T0}
              end),
    Port = (dbg:trace_port(file, File))(),
    1 = erlang:trace(P, true, [{tracer, Port} | ?FLAGS]),
    _ = erlang:trace_pattern({'_', '_', '_'}, [{'_', [], [{message, {caller}}]}], [local]),
    P ! go,
    Us = receive {done, P, T} -> T end,
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    true = port_close(Port),
    Us / 1000.

%% @doc `erl -run flame_real main record Workload File ...': records each
%% workload into its file and prints the traced time. `main loop Workload N':
%% runs the workload N times, untraced (what bench-flame-perf profiles).
-spec main([string()]) -> no_return().
main(["record" | Pairs]) ->
    rec(Pairs),
    halt(0);
main(["loop", W, N]) ->
    F = work(list_to_atom(W)),
    _ = [F() || _ <- lists:seq(1, list_to_integer(N))],
    halt(0).

rec([W, File | More]) ->
    Ms = record(list_to_atom(W), File),
    io:format("flame_real: ~s traced in ~.1f ms into ~s (~b bytes)~n",
              [W, Ms, File, filelib:file_size(File)]),
    rec(More);
rec([]) ->
    ok.

%% @private
init([]) -> {ok, #{}}.

%% @private
handle_call({sort, I}, _From, St) -> {reply, lists:sort([I rem 7, I rem 5, I rem 3]), St}.

%% @private
handle_cast(_, St) -> {noreply, St}.

%%% The benchmarks' sections of bench/RESULTS.md (bench/bench.mk).

%% @doc `stacks BIN DIR RESULTS WORKLOAD...': records each workload (kept in DIR
%% once recorded), runs bench/stack_quality.c on it, writes the section.
%% `sink BIN DIR RESULTS': bench/flame_sink.c on the compile recording.
%% `e2e RESULTS RUNS WORKLOAD...': untraced, eprof and kprof on each workload
%% in one VM, side by side (below). `perf RESULTS DIR WORKLOAD...': the top
%% tables of kprof (corrected and not) and eprof against perf's samples of
%% the untraced workload (below).
-spec run_bench([string()]) -> ok.
run_bench(["stacks", Bin, Dir, Results | Ws]) ->
    Out = [{W, os:cmd(Bin ++ " " ++ trace_file(Dir, W) ++ " 128n 128")} || W <- Ws],
    Text = ["Each workload traced once with `{caller}` into a file (dbg's file port: every "
            "event), then read by bench/stack_quality.c through the sink's flame code into "
            "captures of the same events: the search rules (`callers => true`, the BEAM's "
            "stacks: the reference) and the flow rules (the default, callers not read), "
            "without and with learning tail calls. Per event, the two stacks of its process "
            "are compared over the time until its next event, while it runs: `caller` the "
            "frames under the running function are the same function, `frames` every frame "
            "of the BEAM stack (direct recursion folded) is in the flow stack in order; depth "
            "and call paths (tree nodes) of each. The top frame (the running function) is the "
            "same in every model and event: self times do not depend on the rules.\n\n"
            "| workload | rules | call paths | mean depth | max depth | caller | frames |\n"
            "|---|---|--:|--:|--:|--:|--:|\n",
            [quality_rows(W, O) || {W, O} <- Out],
            io_lib:format("~nLoad average after: ~s.~n", [overhead_bench:load_average()])],
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Flame: stacks without {caller}", Text);
run_bench(["sink", Bin, Dir, Results]) ->
    Load0 = overhead_bench:load_average(),
    Out = os:cmd(Bin ++ " " ++ trace_file(Dir, "compile") ++ " 5"),
    Rows = [maps:from_list([list_to_tuple(string:split(KV, "=")) || KV <- string:lexemes(L, " "),
                                                                   string:find(KV, "=") =/= nomatch])
            || L <- string:split(Out, "\n", all), string:prefix(L, "RESULT ") =/= nomatch],
    Text = ["bench/flame_sink.c: the events of compile:file (recorded as for the stacks "
            "above) as the tracer NIF's ring records, read as the sink reads its ring into "
            "one flame capture of every process (stacks, call-path tree, the top table's "
            "counters), then the folded file written to /dev/null; CPU time of the thread, "
            "medians of 5 runs. Target (issue 22): >= 5,000,000 events per second of sink CPU "
            "on a tree of millions of paths (`callers`: 1.5 M paths).\n\n"
            "| stacks | events | call paths | tree MiB | read CPU s | events/s | write folded CPU s | target |\n"
            "|---|--:|--:|--:|--:|--:|--:|---|\n",
            [io_lib:format("| ~s | ~s | ~s | ~s | ~s | ~s | ~s | ~s |\n",
                           [maps:get("model", R), maps:get("events", R), maps:get("nodes", R),
                            maps:get("tree_mb", R), maps:get("read_cpu_s", R),
                            maps:get("events_per_s", R), maps:get("write_folded_cpu_s", R),
                            case list_to_integer(maps:get("events_per_s", R)) >= 5000000 of
                                true -> "PASS";
                                false -> "FAIL"
                            end])
             || R <- Rows],
            io_lib:format("~nLoad average before / after: ~s / ~s.~n",
                          [Load0, overhead_bench:load_average()])],
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Flame: the sink's flame path", Text);
run_bench(["perf", Results, Dir | Ws]) ->
    ok = kprof:start(),
    Load0 = overhead_bench:load_average(),
    Rs = [perf_compare(list_to_atom(W), Dir) || W <- Ws],
    Text = perf_text(Rs, Load0, overhead_bench:load_average()),
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Flame: the correction against perf", Text);
run_bench(["e2e", Results, RunsS | Ws]) ->
    Runs = list_to_integer(RunsS),
    ok = kprof:start(),
    Dir = filename:join(filename:basedir(user_cache, "kprof-bench"), "flame"),
    ok = filelib:ensure_path(Dir),
    Load0 = overhead_bench:load_average(),
    Rs = [e2e(list_to_atom(W), Runs, Dir) || W <- Ws],
    Load1 = overhead_bench:load_average(),
    Text = e2e_text(Rs, Runs, Load0, Load1),
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Flame: real workloads, beside eprof", Text).

e2e_text(Rs, Runs, Load0, Load1) ->
    ["kprof:flame_apply/2 with the defaults (flow stacks, times corrected), `children => true` "
     "(compile:file does its work in a process it spawns), `top => 100000` and `info => "
     "true`, the folded file; beside eprof:profile/3 of every function (which follows "
     "spawned processes) and the workload untraced (fastest of 5). Medians of ", integer_to_list(Runs),
     " rounds, interleaved. `call to files`: from the call to flame_apply's return; `traced`: "
     "the workload's own time inside it; `files after`: from its end to the return; `sink "
     "CPU`: the sink's user+system time over the call; `sink peak`: its VmHWM (the 64 MiB "
     "ring it maps included); `self sum`: the top table's self times added up (every "
     "process of the capture; waits are not self time), corrected and with `correct => "
     "false`; eprof's: its times added up.

",
     "| workload | untraced ms | eprof ms | kprof call to files ms | kprof / eprof | traced ms | "
     "files after ms | sink CPU ms | sink peak MiB | events | per event ns | self sum ms | "
     "raw self sum ms | eprof self sum ms | clamped ms |
"
     "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
",
     [io_lib:format("| ~s | ~.1f | ~.1f | ~.1f | ~.2f | ~.1f | ~.1f | ~b | ~.1f | ~b | ~b | ~.1f | "
                    "~.1f | ~.1f | ~.1f |
",
                    [W, U, E, K, Ra, T, Fi, C, Rss, Ev, Ns, S, Raw, ES, Cl])
      || #{workload := W, untraced_ms := U, eprof_ms := E, kprof_ms := K, ratio := Ra,
           traced_ms := T, files_ms := Fi, sink_cpu_ms := C, sink_rss_mib := Rss, events := Ev,
           per_event_ns := Ns, self_ms := S, raw_self_ms := Raw, eprof_self_ms := ES,
           clamped_ms := Cl} <- Rs],
     io_lib:format("~nLoad average before / after: ~s / ~s.~n~n", [Load0, Load1]),
     [top15(R) || R = #{workload := compile} <- Rs]].

%% The 15 functions with the most self time, kprof's and eprof's, side by side.
top15(#{kprof_rows := K, eprof_rows := E}) ->
    Ks = lists:sublist([{io_lib:format("~w:~w/~b", [M, F, A]), C, S / 1000}
                        || #{mfa := {M, F, A}, calls := C, self_us := S} <- K], 15),
    Es = lists:sublist([{Fn, C, T / 1000} || {Fn, C, T} <- E], 15),
    Pad = fun(L) -> L ++ lists:duplicate(15 - length(L), {"", 0, 0.0}) end,
    ["compile:file, the first round's top 15 by self time:

"
     "| # | kprof | calls | self ms | eprof | calls | ms |
|--:|---|--:|--:|---|--:|--:|
",
     [io_lib:format("| ~b | `~s` | ~b | ~.1f | `~s` | ~b | ~.1f |
", [I, KF, KC, KS, EF, EC, ET])
      || {I, {KF, KC, KS}, {EF, EC, ET}} <- lists:zip3(lists:seq(1, 15), Pad(Ks), Pad(Es))]].

trace_file(Dir, W) ->
    File = filename:join(Dir, W ++ ".trace"),
    case filelib:is_regular(File) of
        true -> ok;
        false -> _ = record(list_to_atom(W), File), ok
    end,
    File.

quality_rows(W, Out) ->
    Res = [maps:from_list([list_to_tuple(string:split(KV, "=")) || KV <- string:lexemes(L, " "),
                                                                  string:find(KV, "=") =/= nomatch])
           || L <- string:split(Out, "\n", all), string:prefix(L, "RESULT ") =/= nomatch],
    [io_lib:format("| ~s | ~s | ~s | ~s | ~s | ~s | ~s |\n",
                   [W, rules(R), maps:get("nodes", R), maps:get("mean_depth", R),
                    maps:get("max_depth", R), pct(maps:get("parent", R, none)),
                    pct(maps:get("subseq", R, none))])
     || R <- Res].

rules(#{"model" := "callers"}) -> "`{caller}` (BEAM stacks)";
rules(#{"learn" := "0"}) -> "flow, no learning";
rules(#{"learn" := "1"}) -> "flow (default)".

pct(none) -> "-";
pct(S) -> io_lib:format("~.1f %", [list_to_float(S) * 100]).

%%% End to end: call to files, beside eprof and the untraced run.

%% One workload: untraced (fastest of 5), then Runs rounds of eprof, kprof
%% (defaults: flow stacks, corrected) and kprof with correct => false,
%% interleaved; medians.
e2e(W, Runs, Dir) ->
    F = work(W),
    F(),
    Untraced = lists:min([element(1, timer:tc(F)) || _ <- lists:seq(1, 5)]) / 1000,
    Rounds = [{eprof(F), kprof(F, Dir, #{}), kprof(F, Dir, #{correct => false})}
              || _ <- lists:seq(1, Runs)],
    Med = fun(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)) end,
    E = [R || {R, _, _} <- Rounds],
    K = [R || {_, R, _} <- Rounds],
    Raw = [R || {_, _, R} <- Rounds],
    KM = fun(Key) -> Med([maps:get(Key, R) || R <- K]) end,
    #{workload => W, untraced_ms => Untraced,
      eprof_ms => Med([maps:get(profile_ms, R) || R <- E]),
      eprof_self_ms => Med([maps:get(self_ms, R) || R <- E]),
      kprof_ms => KM(call_to_files_ms), traced_ms => KM(traced_ms), files_ms => KM(files_ms),
      sink_cpu_ms => KM(sink_cpu_ms), sink_rss_mib => KM(sink_rss_mib),
      self_ms => KM(self_ms), raw_self_ms => Med([maps:get(self_ms, R) || R <- Raw]),
      per_event_ns => KM(per_event_ns), clamped_ms => KM(clamped_ms), events => KM(events),
      ratio => Med([maps:get(call_to_files_ms, Kr) / maps:get(profile_ms, Er)
                    || {Er, Kr, _} <- Rounds]),
      eprof_rows => maps:get(rows, hd(E)), kprof_rows => maps:get(top, hd(K))}.

%% eprof:profile/3 of every function (eprof follows spawned processes), its
%% analysis read back from eprof's log: [{Function, Calls, Us}], most time first.
eprof(F) ->
    {ok, _} = eprof:start(),
    T0 = erlang:monotonic_time(microsecond),
    {ok, _} = eprof:profile([], F, {'_', '_', '_'}),
    T1 = erlang:monotonic_time(microsecond),
    Log = filename:join(filename:basedir(user_cache, "kprof-bench"), "eprof.txt"),
    ok = filelib:ensure_dir(Log),
    _ = file:delete(Log),
    ok = eprof:log(Log),
    GL = group_leader(),
    {ok, Null} = file:open("/dev/null", [write]),
    group_leader(Null, self()),
    _ = eprof:analyze(total, [{sort, time}]),
    group_leader(GL, self()),
    stopped = eprof:stop(),
    {ok, B} = file:read_file(Log),
    Rows = lists:reverse(lists:keysort(3,
             [{Fn, binary_to_integer(C), binary_to_integer(T)}
              || L <- binary:split(B, <<"\n">>, [global]),
                 [Fn, C, _Pct, T | _] <- [binary:split(L, <<" ">>, [global, trim_all])],
                 binary:match(Fn, <<"/">>) =/= nomatch, is_int(C), is_int(T)])),
    #{profile_ms => (T1 - T0) / 1000, rows => Rows,
      self_ms => lists:sum([T || {_, _, T} <- Rows]) / 1000}.

is_int(B) ->
    try _ = binary_to_integer(B), true catch error:badarg -> false end.

%% kprof:flame_apply/2 of F, children followed (compile's work runs in a
%% process it spawns), folded file, top table of every function.
kprof(F, Dir, Opts) ->
    #{os_pid := Os} = kprof_sink:info(),
    Self = self(),
    G = fun() -> T0 = erlang:monotonic_time(microsecond), F(),
                 Self ! {done, T0, erlang:monotonic_time(microsecond)}, ok end,
    C0 = cpu_ms(Os),
    T0 = erlang:monotonic_time(microsecond),
    {ok, ok, _, S} = kprof:flame_apply(G, Opts#{children => true, top => 100000, info => true,
                                                output_format => folded, progress => false,
                                                output_directory => Dir}),
    T1 = erlang:monotonic_time(microsecond),
    C1 = cpu_ms(Os),
    {A, B} = receive {done, X, Y} -> {X, Y} end,
    #{top := Top, correction := Corr, events := Ev} = S,
    #{call_to_files_ms => (T1 - T0) / 1000, traced_ms => (B - A) / 1000,
      files_ms => (T1 - B) / 1000, sink_cpu_ms => C1 - C0, sink_rss_mib => rss_mib(Os),
      self_ms => lists:sum([Su || #{self_us := Su} <- Top]) / 1000, top => Top,
      per_event_ns => maps:get(per_event_ns, Corr),
      clamped_ms => maps:get(clamped_us, Corr) / 1000, events => Ev}.

cpu_ms(Os) ->
    {ok, S} = file:read_file("/proc/" ++ integer_to_list(Os) ++ "/stat"),
    [_, Rest] = binary:split(S, <<") ">>),
    Fs = binary:split(Rest, <<" ">>, [global]),
    (binary_to_integer(lists:nth(12, Fs)) + binary_to_integer(lists:nth(13, Fs))) * 10.

%% The sink's peak resident memory (VmHWM), MiB.
rss_mib(Os) ->
    {ok, S} = file:read_file("/proc/" ++ integer_to_list(Os) ++ "/status"),
    [V] = [V || L <- binary:split(S, <<"\n">>, [global]),
                [<<"VmHWM:">>, V, _] <- [binary:split(L, [<<" ">>, <<"\t">>], [global, trim_all])]],
    binary_to_integer(V) / 1024.

%%% The correction against perf: which functions the untraced run spends its
%%% time in, from perf's samples of it (the JIT's perf map, `erl +JPperf
%%% true'), beside kprof's top table corrected and raw and eprof's.

%% perf record of the untraced workload in a VM of its own, run often enough
%% for some 5 s of samples; each sample of a normal scheduler thread goes to
%% the first frame of its call chain (DWARF unwinding of the C frames) that
%% is an Erlang function (JIT code, `$M:F/A') or a BIF's C function
%% (`setelement_3', `maps_from_list_1'): the function it ran in. Samples in
%% the runtime's other C code (garbage collection, map and compare
%% instructions, reached through the JIT's shared fragments) have no such
%% frame: counted as unattributed.
perf_compare(W, Dir) ->
    F = work(W),
    F(),
    Untraced = lists:min([element(1, timer:tc(F)) || _ <- lists:seq(1, 5)]) / 1000,
    KDir = filename:join(filename:basedir(user_cache, "kprof-bench"), "flame"),
    ok = filelib:ensure_path(KDir),
    #{top := Kc0, per_event_ns := Ns} = kprof(F, KDir, #{}),
    #{top := Kr0} = kprof(F, KDir, #{correct => false}),
    #{rows := E0} = eprof(F),
    Name = fun({M, Fn, A}) -> lists:flatten(io_lib:format("~w:~w/~b", [M, Fn, A])) end,
    Kc = [{Name(M), S} || #{mfa := M, self_us := S} <- Kc0],
    Kr = [{Name(M), S} || #{mfa := M, self_us := S} <- Kr0],
    E = [{binary_to_list(Fn), T} || {Fn, _, T} <- E0],
    Known = lists:usort([Fn || {Fn, _} <- Kc ++ Kr ++ E]),
    Bifs = maps:from_list(lists:append([[{list_to_binary(C), Fn} || C <- c_names(Fn)]
                                        || Fn <- lists:reverse(Known)])),
    N = max(3, round(5000 / max(Untraced, 1.0))),
    Data = filename:join(Dir, atom_to_list(W) ++ ".perf.data"),
    Script = filename:join(Dir, atom_to_list(W) ++ ".perf.txt"),
    Cmd = lists:flatten(io_lib:format(
            "perf record -q -F 999 --call-graph dwarf,8192 -o ~s -- erl +JPperf true -noshell "
            "-pa ~s -eval 'flame_real:main([\"loop\", \"~s\", \"~b\"])' >/dev/null 2>&1 && "
            "perf script -i ~s > ~s 2>/dev/null && echo ok",
            [Data, Dir, W, N, Data, Script])),
    Perf = case string:trim(os:cmd(Cmd)) of
               "ok" -> perf_shares(Script, Bifs);
               _ -> none
           end,
    _ = file:delete(Data),
    _ = file:delete(Script),
    #{workload => W, untraced_ms => Untraced, runs => N, perf => Perf, per_event_ns => Ns,
      corrected => Kc, raw => Kr, eprof => E}.

%% {Shares, Samples, Unattributed}: Shares [{Function, Samples}], most first,
%% named as kprof and eprof name functions.
perf_shares(Script, Bifs) ->
    {ok, Fd} = file:open(Script, [read, raw, binary, read_ahead]),
    {Counts, Total, Un} = perf_samples(Fd, Bifs, skip, #{}, 0, 0),
    ok = file:close(Fd),
    {lists:reverse(lists:keysort(2, maps:to_list(Counts))), Total, Un}.

%% State: skip (not a scheduler's sample, or attributed), seek (a
%% scheduler's sample not yet attributed).
perf_samples(Fd, Bifs, State, Counts, Total, Un) ->
    Left = case State of seek -> 1; skip -> 0 end,
    case file:read_line(Fd) of
        eof ->
            {Counts, Total, Un + Left};
        {ok, <<"\n">>} ->
            perf_samples(Fd, Bifs, skip, Counts, Total, Un + Left);
        {ok, <<"\t", _/binary>> = L} when State =:= seek ->
            case perf_frame(L, Bifs) of
                none ->
                    perf_samples(Fd, Bifs, seek, Counts, Total, Un);
                Fn ->
                    perf_samples(Fd, Bifs, skip,
                                 maps:update_with(Fn, fun(C) -> C + 1 end, 1, Counts), Total, Un)
            end;
        {ok, <<"\t", _/binary>>} ->
            perf_samples(Fd, Bifs, State, Counts, Total, Un);
        {ok, Head} ->
            [Thread | _] = binary:split(Head, <<" ">>),
            case binary:match(Thread, <<"_scheduler">>) =/= nomatch andalso
                binary:match(Thread, <<"dirty">>) =:= nomatch of
                true -> perf_samples(Fd, Bifs, seek, Counts, Total + 1, Un + Left);
                false -> perf_samples(Fd, Bifs, skip, Counts, Total, Un + Left)
            end
    end.

%% A frame line's function: "$M:F/A" (JIT code) or a BIF's C function, named
%% as kprof names it; else none.
perf_frame(L, Bifs) ->
    case binary:split(string:trim(L), <<" ">>, [global, trim_all]) of
        [_Addr, Sym | _] ->
            [Name | _] = binary:split(Sym, <<"+0x">>),
            case Name of
                <<"$global::", _/binary>> -> none;
                <<"$", Fn/binary>> -> quoted(binary_to_list(Fn));
                _ -> maps:get(Name, Bifs, none)
            end;
        _ ->
            none
    end.

%% Per workload: the rank correlation of each table with perf's over perf's
%% 30 first functions, how many of perf's first 15 each has in its first 15,
%% and the four first 15s side by side.
perf_text(Rs, Load0, Load1) ->
    ["Each workload run untraced under `perf record -F 999 --call-graph dwarf` in a VM "
     "started with `+JPperf true`; each sample of a normal scheduler thread goes to the "
     "first frame of its call chain that is an Erlang function (JIT code) or a BIF's C "
     "function (`setelement_3`: `erlang:setelement/3`), the function it ran in; the rest "
     "(garbage collection, map and compare instructions reached through the JIT's shared "
     "code: no Erlang frame to give them to) is unattributed. Beside it, one run each of "
     "kprof's top table (defaults: times corrected), with `correct => false`, and eprof's. "
     "`rho`: Spearman's rank correlation with perf over perf's 30 first functions (1: "
     "the same order); `in top 15`: how many of perf's 15 first are in the table's 15 "
     "first.\n\n",
     "| workload | untraced ms | samples | unattributed | per event ns | kprof rho | raw rho "
     "| eprof rho | kprof in top 15 | raw in top 15 | eprof in top 15 |\n"
     "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
     [perf_row(R) || R <- Rs],
     io_lib:format("~nLoad average before / after: ~s / ~s.~n", [Load0, Load1]),
     [perf_top15(R) || R = #{perf := {_, _, _}} <- Rs]].

perf_row(#{workload := W, perf := none, untraced_ms := U}) ->
    io_lib:format("| ~s | ~.1f | perf did not run (not installed, or "
                  "kernel.perf_event_paranoid) | | | | | | | | |\n", [W, U]);
perf_row(R = #{workload := W, untraced_ms := U, perf := {_, Total, Un}, per_event_ns := Ns}) ->
    P = perf_named(R),
    Top30 = [Fn || {Fn, _} <- lists:sublist(P, 30)],
    Top15 = lists:sublist(Top30, 15),
    Rho = fun(T) -> spearman(P, T, Top30) end,
    In = fun(T) -> length([x || {Fn, _} <- lists:sublist(T, 15), lists:member(Fn, Top15)]) end,
    #{corrected := Kc, raw := Kr, eprof := E} = R,
    io_lib:format("| ~s | ~.1f | ~b | ~.1f % | ~b | ~.2f | ~.2f | ~.2f | ~b | ~b | ~b |\n",
                  [W, U, Total, 100 * Un / max(Total, 1), Ns, Rho(Kc), Rho(Kr), Rho(E),
                   In(Kc), In(Kr), In(E)]).

perf_named(#{perf := {Shares, _, _}}) ->
    Shares.

%% "m:-f/1-fun-0-/2" (perf's map) as kprof and eprof write it: "m:'-f/1-fun-0-'/2".
quoted(Fn) ->
    case string:split(Fn, ":") of
        [M, FA] ->
            case string:split(FA, "/", trailing) of
                [[$' | _], _] -> Fn;   % quoted already
                [F, A] -> lists:flatten(io_lib:format("~w:~w/~s", [list_to_atom(M),
                                                                    list_to_atom(F), A]));
                _ -> Fn
            end;
        _ ->
            Fn
    end.

c_names(Fn) ->
    case string:split(Fn, ":") of
        [M, FA] ->
            case string:split(FA, "/", trailing) of
                [F, A] -> [F ++ "_" ++ A, M ++ "_" ++ F ++ "_" ++ A, "ebif_" ++ F ++ "_" ++ A];
                _ -> []
            end;
        _ ->
            []
    end.

%% Spearman's rho of two tables' values over Keys (average ranks for ties).
spearman(A, B, Keys) ->
    Ra = ranks([{K, proplists:get_value(K, A, 0)} || K <- Keys]),
    Rb = ranks([{K, proplists:get_value(K, B, 0)} || K <- Keys]),
    N = length(Keys),
    D2 = lists:sum([math:pow(maps:get(K, Ra) - maps:get(K, Rb), 2) || K <- Keys]),
    1 - 6 * D2 / (N * (N * N - 1)).

ranks(KVs) ->
    Sorted = lists:reverse(lists:keysort(2, KVs)),
    Indexed = lists:zip(lists:seq(1, length(Sorted)), Sorted),
    maps:from_list([{K, avg([I || {I, {_, V2}} <- Indexed, V2 =:= V])} || {_, {K, V}} <- Indexed]).

avg(L) -> lists:sum(L) / length(L).

perf_top15(R = #{workload := W, perf := {_, Total, _}, corrected := Kc, raw := Kr, eprof := E}) ->
    P = perf_named(R),
    Col = fun(T, Div) -> [{Fn, V / Div} || {Fn, V} <- lists:sublist(T, 15)] end,
    Pad = fun(L) -> L ++ lists:duplicate(15 - length(L), {"", 0.0}) end,
    Cols = [Pad(Col(Kc, 1000)), Pad(Col(Kr, 1000)), Pad(Col(E, 1000)),
            Pad([{Fn, 100 * N / max(Total, 1)} || {Fn, N} <- lists:sublist(P, 15)])],
    [io_lib:format("~n~s, the 15 first of each:~n~n", [W]),
     "| # | kprof (corrected) | ms | kprof `correct => false` | ms | eprof | ms | perf, untraced "
     "| % of samples |\n|--:|---|--:|---|--:|---|--:|---|--:|\n",
     [io_lib:format("| ~b | `~s` | ~.1f | `~s` | ~.1f | `~s` | ~.1f | `~s` | ~.2f |\n",
                    [I, A, Av, B, Bv, C, Cv, D, Dv])
      || {I, [{A, Av}, {B, Bv}, {C, Cv}, {D, Dv}]}
             <- lists:zip(lists:seq(1, 15), transpose(Cols))]].

transpose([[] | _]) -> [];
transpose(Ls) -> [[hd(L) || L <- Ls] | transpose([tl(L) || L <- Ls])].
