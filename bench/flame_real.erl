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
%% workload into its file and prints the traced time.
-spec main([string()]) -> no_return().
main(["record" | Pairs]) ->
    rec(Pairs),
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
%% in one VM, side by side (below).
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
