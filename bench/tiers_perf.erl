%%% @doc Where the VM's and the sink's time goes with tiers on, by perf
%%% (`make bench-tiers-perf'; needs perf and the right to record this
%%% user's processes): the synthetic service of {@link tiers_bench} at a
%%% fixed rate, untraced then with tiers, `perf record' of the VM (run with
%%% `+JPperf true': the JIT's functions have names) and of the sink during
%%% each drive; then, per symbol, the CPU per request (samples / frequency /
%%% requests) of both, and the symbols whose time per request grew the most.
%%% Debian's ERTS has no symbols for its static functions: they show as
%%% addresses in beam.smp. Rewrites the section "Tiers: perf of the node and
%%% the sink" of bench/RESULTS.md. Not a test: nothing fails on a number.
-module(tiers_perf).

-export([main/1]).

-define(TIERS, [{http, [{tiers_bench, http, 1}]}, {db, [{tiers_bench, db_query, 1}]},
                {templating, [{tiers_bench, tpl_render, 1}]}]).
-define(SECTION, "Tiers: perf of the node and the sink").
-define(HZ, 999).
-define(TOP, 25).

%% @doc `main([Rate, Seconds, Dir, ResultsFile])': perf's files in Dir.
-spec main([string()]) -> no_return().
main([Rate0, Seconds0, Dir, Results]) ->
    [Rate, Seconds] = [list_to_integer(A) || A <- [Rate0, Seconds0]],
    logger:set_handler_config(default, level, error),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    ok = kprof:start(),
    ok = tiers_bench:start_service(),
    ok = kprof:start_tiers(?TIERS, #{}),      % the ring opened: the sink reads it from now on
    ok = kprof:stop_tiers(),
    _ = tiers_bench:drive(Rate, 1, tiers_bench:request_fun()),
    Load0 = overhead_bench:load_average(),
    Runs = [{Mode, run(Mode, Rate, Seconds, Dir)} || Mode <- [untraced, tiers]],
    Load1 = overhead_bench:load_average(),
    Text = [io_lib:format("`make bench-tiers-perf`: the synthetic service of bench-tiers at ~b "
                          "req/s for ~b s untraced, then with tiers; `perf record -F ~b -g` of "
                          "the VM (`+JPperf true`) and of the sink during each drive. Load "
                          "average before / after: ~s / ~s.~n~n",
                          [Rate, Seconds, ?HZ, Load0, Load1]),
            [part(Who, Runs) || Who <- [vm, sink]]],
    io:put_chars(Text),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

%% One drive under perf: {Requests, #{vm => Counts, sink => Counts}}.
-spec run(untraced | tiers, pos_integer(), pos_integer(), string()) ->
          {pos_integer(), #{vm | sink => #{string() => non_neg_integer()}}}.
run(Mode, Rate, Seconds, Dir) ->
    _ = Mode =:= tiers andalso (ok =:= kprof:start_tiers(?TIERS, #{})),
    #{os_pid := SinkPid} = kprof_sink:info(),
    Files = #{vm => filename:join(Dir, atom_to_list(Mode) ++ ".vm.data"),
              sink => filename:join(Dir, atom_to_list(Mode) ++ ".sink.data")},
    Self = self(),
    Perfs = [spawn_link(fun() ->
                                _ = os:cmd(io_lib:format("perf record -q -F ~b -g -o ~s -p ~s "
                                                         "-- sleep ~b 2>&1",
                                                         [?HZ, F, P, Seconds])),
                                Self ! {recorded, self()}
                        end)
             || {F, P} <- [{maps:get(vm, Files), os:getpid()},
                           {maps:get(sink, Files), integer_to_list(SinkPid)}]],
    %% The drive's time is perf's: requests counted in those seconds.
    T0 = erlang:monotonic_time(millisecond),
    R = tiers_bench:drive(Rate, Seconds, tiers_bench:request_fun()),
    [receive {recorded, P} -> ok end || P <- Perfs],
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    _ = Mode =:= tiers andalso (ok =:= kprof:stop_tiers()),
    Requests = min(maps:get(requests, R), round(maps:get(achieved, R) * Seconds)),
    io:format("~p: ~b requests in ~.1f s~n", [Mode, Requests, Secs]),
    {Requests, maps:map(fun(_, F) -> samples(F) end, Files)}.

%% Samples per "dso symbol", from perf report (JIT thread ids taken out).
-spec samples(string()) -> #{string() => non_neg_integer()}.
samples(File) ->
    Out = os:cmd("perf report -i " ++ File ++ " --no-children --sort dso,sym --stdio -g none "
                 "-F sample,dso,sym 2>/dev/null"),
    lists:foldl(fun(Line, Acc) ->
                        case string:lexemes(Line, " ") of
                            [N | Rest = [_ | _]] ->
                                case string:to_integer(N) of
                                    {Count, []} ->
                                        Key = re:replace(lists:join(" ", Rest), "tid [0-9]+",
                                                         "tid", [{return, list}, global]),
                                        maps:update_with(Key, fun(C) -> C + Count end, Count,
                                                         Acc);
                                    _ -> Acc
                                end;
                            _ -> Acc
                        end
                end, #{}, string:split(Out, "\n", all)).

-spec part(vm | sink, [{atom(), {pos_integer(), map()}}]) -> iolist().
part(Who, Runs) ->
    {NU, #{Who := U}} = proplists:get_value(untraced, Runs),
    {NT, #{Who := T}} = proplists:get_value(tiers, Runs),
    Us = fun(Samples, N) -> 1.0e6 * Samples / ?HZ / N end,
    Sum = fun(M) -> lists:sum(maps:values(M)) end,
    Keys = lists:usort(maps:keys(U) ++ maps:keys(T)),
    Rows = lists:sublist(lists:reverse(lists:keysort(2, [{K, Us(maps:get(K, T, 0), NT)
                                                          - Us(maps:get(K, U, 0), NU)}
                                                         || K <- Keys])), ?TOP),
    [io_lib:format("~s: ~.1f us of CPU per request untraced, ~.1f with tiers (perf's "
                   "samples); the ~b symbols whose time per request grew the most:~n~n",
                   [case Who of vm -> "The VM"; sink -> "The sink" end,
                    Us(Sum(U), NU), Us(Sum(T), NT), ?TOP]),
     "| symbol | untraced us/req | tiers us/req | difference |\n|---|--:|--:|--:|\n",
     [io_lib:format("| `~ts` | ~.3f | ~.3f | ~.3f |~n",
                    [K, Us(maps:get(K, U, 0), NU), Us(maps:get(K, T, 0), NT), D])
      || {K, D} <- Rows],
     "\n"].
