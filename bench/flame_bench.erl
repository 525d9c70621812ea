%%% @doc What a big flame capture costs the sink (`make bench-flame').
%%%
%%% `kprof:flame_apply/2' of a loop that makes 3 trace events an
%%% iteration (a body call, its return_to, the loop's tail call) and waits
%%% a millisecond every 64 iterations, as real work does now and then (a
%%% loop of nothing but calls makes events faster than the VM hands them to
%%% any port, and the VM's port queue then drains in quadratic time:
%%% doc/flame.md). Two sizes side by side in one run, each with a fresh
%%% sink: `Small' and `Big' events (1 M and 10 M by default). Per size:
%%% events recorded, events/s while tracing, the sink's peak RSS (VmHWM),
%%% the time from the end of the work to the files on disk, each format's
%%% write time and size. The ratios big/small show what grows with the
%%% events (time) and what does not (memory, file sizes: the stacks are
%%% the same). Targets (issue 6): 10 M events in at most 100 MB of sink
%%% memory, all files written at most 2 s after the capture ends. Prints a
%%% table and rewrites the "Flame capture" section of bench/RESULTS.md.
%%% Not a test: nothing fails on a number.
-module(flame_bench).

-export([main/1, events_loop/1, leaf2/1, log/2]).

%% @doc `main([Small, Big, ResultsFile])', strings (from the Makefile).
-spec main([string()]) -> no_return().
main([Small0, Big0, Results]) ->
    Sizes = [list_to_integer(Small0), list_to_integer(Big0)],
    logger:set_handler_config(default, level, error),
    Dir = filename:join(["_build", "bench", "flame-out"]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Load = overhead_bench:load_average(),
    io:format("flame bench: ~p events; load average ~s~n", [Sizes, Load]),
    Rows = [capture(N, Dir) || N <- Sizes],
    Table = table(Rows),
    io:put_chars(Table),
    ok = overhead_bench:write_section(Results, "Flame capture", section(Table, Rows, Load)),
    io:format("flame bench: wrote the \"Flame capture\" section of ~s~n", [Results]),
    halt(0).

%% @private The traced loop (see the module doc).
-spec events_loop(non_neg_integer()) -> ok.
events_loop(0) ->
    ok;
events_loop(N) ->
    _ = ?MODULE:leaf2(N),
    case N band 63 of
        0 -> receive after 1 -> ok end;
        _ -> ok
    end,
    events_loop(N - 1).

%% @private
-spec leaf2(integer()) -> integer().
leaf2(N) ->
    N + 1.

%% @private logger handler: the sink's figures of the written capture.
-spec log(logger:log_event(), logger:handler_config()) -> ok.
log(#{msg := {report, #{what := kprof_flame_written} = R}}, #{config := #{pid := Pid}}) ->
    Pid ! {written, R},
    ok;
log(_, _) ->
    ok.

-spec capture(pos_integer(), file:filename()) -> map().
capture(Want, Dir) ->
    ok = kprof:start(),
    ok = logger:set_primary_config(level, info),
    ok = logger:add_handler(flame_bench, ?MODULE, #{config => #{pid => self()}, level => info}),
    #{os_pid := OsPid} = kprof_sink:info(),
    Iterations = Want div 3 + 1000,
    Self = self(),
    T0 = erlang:monotonic_time(microsecond),
    %% The bounds of the guard are the defaults but for the lag: this
    %% machine may be shared, and the bench measures memory and time.
    {ok, ok, Files} =
        kprof:flame_apply(fun() ->
                                  R = ?MODULE:events_loop(Iterations),
                                  Self ! {work_done, erlang:monotonic_time(microsecond)},
                                  R
                          end, #{output_directory => Dir, name => "bench-" ++ integer_to_list(Want),
                                 max_lag_ms => 60000}),
    T2 = erlang:monotonic_time(microsecond),
    T1 = receive {work_done, T} -> T end,
    Info = receive {written, #{info := I}} -> I after 10000 -> #{} end,
    ok = logger:remove_handler(flame_bench),
    ok = logger:set_primary_config(level, notice),
    HwmKb = vm_hwm_kb(OsPid),
    ok = kprof:stop(),
    Events = maps:get(events, Info, 0),
    #{events => Events, want => Want, traced_s => (T1 - T0) / 1.0e6,
      files_s => (T2 - T1) / 1.0e6, hwm_kb => HwmKb, write_us => maps:get(write_us, Info, #{}),
      sizes => [{format_of(F), filelib:file_size(F)} || F <- Files]}.

format_of(F) ->
    case lists:suffix(".speedscope.json", F) of
        true -> speedscope;
        false -> list_to_atom(tl(filename:extension(F)))
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
    Write = fun(K) -> fun(R) -> maps:get(K, maps:get(write_us, R), 0) / 1000 end end,
    Size = fun(K) -> fun(R) -> proplists:get_value(K, maps:get(sizes, R), 0) / 1024 end end,
    ["| | ", integer_to_list(maps:get(want, S)), " events | ", integer_to_list(maps:get(want, B)),
     " events | big / small |\n|---|--:|--:|--:|\n",
     Row("events recorded", fun(R) -> maps:get(events, R) end, "~b"),
     Row("traced for (s)", fun(R) -> maps:get(traced_s, R) end, "~.2f"),
     Row("events/s while traced", fun(R) -> round(maps:get(events, R) / maps:get(traced_s, R)) end,
         "~b"),
     Row("sink peak RSS (MiB)", fun(R) -> maps:get(hwm_kb, R) / 1024 end, "~.1f"),
     Row("end of work to files on disk (s)", fun(R) -> maps:get(files_s, R) end, "~.3f"),
     [Row(io_lib:format("write ~s (ms)", [K]), Write(K), "~.1f")
      || K <- [folded, perf, speedscope, svg]],
     [Row(io_lib:format("~s size (KiB)", [K]), Size(K), "~.1f")
      || K <- [folded, perf, speedscope, svg]]].

ratio(_, V) when V == 0 -> "-";
ratio(A, B) -> io_lib:format("~.2f", [A / B]).

%% The section's body (overhead_bench:write_section/3 adds the heading, date
%% and machine).
section(Table, [_, Big], Load) ->
    MiB = maps:get(hwm_kb, Big) / 1024,
    Files = maps:get(files_s, Big),
    [io_lib:format("`make bench-flame`; load average before the run: ~s.~n~n", [Load]),
     "kprof:flame_apply/2 of a loop making 3 events an iteration (bench/flame_bench.erl), two "
     "sizes side by side, each with a fresh sink. Peak RSS is the sink's VmHWM; \"end of work "
     "to files\" runs from the traced fun's last instruction to flame_apply/2 returning the "
     "four files.\n\n",
     Table, "\n",
     io_lib:format("Targets for ~b events: sink peak RSS <= 100 MB: ~.1f MiB (~s); files <= 2 s "
                   "after the capture: ~.3f s (~s).~n~n",
                   [maps:get(want, Big), MiB, pass(MiB * 1.048576 =< 100), Files,
                    pass(Files =< 2.0)])].

pass(true) -> "PASS";
pass(false) -> "FAIL".

