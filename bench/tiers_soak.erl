%%% @doc Tiers left on at rate (`make soak-tiers'): examples/shop under its
%%% load generator (shop_load's mix of routes, open loop) at the highest
%%% rate it sustains untraced, for a stretch untraced, then the same
%%% stretch with tiers on its three tier modules (shop_demo:tiers/0 and
%%% tier_opts/0), in windows of 30 s.
%%%
%%% The rate: given, or probed first (untraced, 5 s per rate, rising): the
%%% highest whose achieved rate is at least 97 % of the offered one with no
%%% request failed or left unsent. Per window: latency percentiles, the
%%% achieved rate, the VM's memory (erlang:memory(total), and its resident
%%% set) and the sink's resident set, the load average; with tiers, the
%%% sink's trace events and everything the report counts as dropped, and
%%% tracing's own estimate of its cost (kprof_tiers_cost). At the end, the
%%% tiers' report. Rewrites the section "Tiers: a soak at rate" of
%%% bench/RESULTS.md. Not a test: nothing fails on a number.
-module(tiers_soak).

-export([main/1]).

-define(SECTION, "Tiers: a soak at rate").
-define(PROBE_RATES, [100, 200, 400, 600, 800, 1000, 1500, 2000, 3000, 4000]).
-define(PROBE_MS, 5000).

%% @doc `main([Rate | "auto", Seconds, WindowSeconds, ResultsFile])'.
-spec main([string()]) -> no_return().
main([Rate0, Seconds0, Window0, Results]) ->
    [Seconds, WindowS] = [list_to_integer(A) || A <- [Seconds0, Window0]],
    logger:set_handler_config(default, level, error),
    ok = kprof:start(),
    {ok, #{port := Port}} = shop:start(#{}),
    Load0 = overhead_bench:load_average(),
    _ = drive(Port, 100, 2000),                       % warm-up
    {Rate, Probes} = case Rate0 of
                         "auto" -> probe(Port);
                         _ -> {list_to_integer(Rate0), []}
                     end,
    Windows = max(1, Seconds div WindowS),
    io:format("tiers soak: ~b req/s, ~b windows of ~b s untraced, then the same with tiers; "
              "load average ~s~n", [Rate, Windows, WindowS, Load0]),
    Untraced = [window(untraced, Port, Rate, WindowS, I) || I <- lists:seq(1, Windows)],
    ok = kprof:start_tiers(shop_demo:tiers(), shop_demo:tier_opts()),
    Traced = [window(tiers, Port, Rate, WindowS, I) || I <- lists:seq(1, Windows)],
    {ok, Report} = kprof:report(#{format => string}),
    {ok, Term} = kprof:report(#{format => term}),
    ok = kprof:stop_tiers(),
    ok = shop:stop(),
    Load1 = overhead_bench:load_average(),
    Text = [io_lib:format("`make soak-tiers`: examples/shop (SQLite), shop_load's default mix "
                          "of routes (60 % `/users/:id`, 35 % `/catalog`, 5 % `/report`), "
                          "open loop, ~b req/s, ~b windows of ~b s untraced, then the same "
                          "with `kprof:start_tiers(shop_demo:tiers(), shop_demo:tier_opts())`. "
                          "Load average before / after: ~s / ~s.~n~n",
                          [Rate, Windows, WindowS, Load0, Load1]),
            probes(Probes), table(Untraced, Traced), "\n", summary(Untraced, Traced, Term),
            "\nThe tiers' report at the end:\n\n```\n", Report, "```\n"],
    io:put_chars(Text),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

%% The highest rate the shop sustains untraced, and what each probe gave.
-spec probe(inet:port_number()) -> {pos_integer(), [{pos_integer(), map()}]}.
probe(Port) ->
    probe(Port, ?PROBE_RATES, hd(?PROBE_RATES), []).

probe(_Port, [], Best, Acc) ->
    {Best, lists:reverse(Acc)};
probe(Port, [Rate | Rest], Best, Acc) ->
    R = drive(Port, Rate, ?PROBE_MS),
    #{rate := Achieved, failed := F, not_sent := NS} = R,
    case Achieved >= 0.97 * Rate andalso F =:= 0 andalso NS =:= 0 of
        true -> probe(Port, Rest, Rate, [{Rate, R} | Acc]);
        false -> {Best, lists:reverse([{Rate, R} | Acc])}
    end.

-spec drive(inet:port_number(), pos_integer(), pos_integer()) -> map().
drive(Port, Rate, Ms) ->
    shop_load:run(#{port => Port, rate => Rate, duration_ms => Ms, concurrency => 500}).

-spec window(untraced | tiers, inet:port_number(), pos_integer(), pos_integer(),
             pos_integer()) -> map().
window(Mode, Port, Rate, WindowS, I) ->
    R = drive(Port, Rate, WindowS * 1000),
    #{latency := #{p50 := P50, p90 := P90, p99 := P99, max := Max}, rate := Achieved,
      failed := Failed, not_sent := NotSent} = R,
    Stats = kprof:sink_stats(),
    Tiers = case Mode of
                tiers ->
                    {ok, Rep} = kprof:report(#{format => term}),
                    #{dropped => maps:get(dropped, Rep), requests => maps:get(requests, Rep),
                      overhead => case maps:get(overhead, Rep) of
                                      [#{share := S}] when is_number(S) -> S;
                                      _ -> undefined
                                  end};
                untraced ->
                    #{}
            end,
    W = Tiers#{mode => Mode, t => I * WindowS, p50 => P50, p90 => P90, p99 => P99, max => Max,
               achieved => Achieved, failed => Failed, not_sent => NotSent,
               vm_mb => erlang:memory(total) / 1048576, vm_rss_mb => rss_mb(os:getpid()),
               sink_rss_mb => sink_rss_mb(), events => maps:get(trace_events, Stats),
               ring_drops => maps:get(ring_drops, Stats, 0),
               load => overhead_bench:load_average()},
    io:format("~p~n", [W]),
    W.

-spec sink_rss_mb() -> float().
sink_rss_mb() ->
    #{os_pid := P} = kprof_sink:info(),
    rss_mb(integer_to_list(P)).

%% VmRSS of an OS process (MB), from /proc; 0.0 without it.
-spec rss_mb(string()) -> float().
rss_mb(OsPid) ->
    case file:read_file("/proc/" ++ OsPid ++ "/status") of
        {ok, B} ->
            case re:run(B, "VmRSS:\\s+([0-9]+) kB", [{capture, all_but_first, list}]) of
                {match, [Kb]} -> list_to_integer(Kb) / 1024;
                nomatch -> 0.0
            end;
        _ ->
            0.0
    end.

%%%%%%%%%%%%%%
%%% TABLES %%%
%%%%%%%%%%%%%%

-spec probes([{pos_integer(), map()}]) -> iolist().
probes([]) ->
    [];
probes(Probes) ->
    ["The rate, probed untraced (", integer_to_list(?PROBE_MS div 1000), " s each): ",
     lists:join("; ", [io_lib:format("~b req/s: ~.1f achieved, p99 ~.1f ms, ~b failed, "
                                     "~b not sent", [Rate, A, P99, F, NS])
                       || {Rate, #{rate := A, latency := #{p99 := P99}, failed := F,
                                   not_sent := NS}} <- Probes]),
     ".\n\n"].

-spec table([map()], [map()]) -> iolist().
table(Untraced, Traced) ->
    ["| window end s | untraced p50 ms | p90 | p99 | achieved/s | tiers p50 ms | p90 | p99 "
     "| achieved/s | p50 / untraced | p99 / untraced | VM MB | VM RSS MB | sink RSS MB "
     "| trace events | dropped (report) | tracing's share | load (1 min) |\n"
     "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
     [io_lib:format("| ~b | ~.3f | ~.3f | ~.3f | ~.1f | ~.3f | ~.3f | ~.3f | ~.1f | ~.3f | ~.3f "
                    "| ~.1f | ~.1f | ~.1f | ~b | ~b | ~s | ~s |~n",
                    [T, U50, U90, U99, UA, T50, T90, T99, TA, T50 / U50, T99 / U99, Vm, Rss,
                     Sink, E, D, share(O), hd(string:lexemes(L, " "))])
      || {#{t := T, p50 := U50, p90 := U90, p99 := U99, achieved := UA},
          #{p50 := T50, p90 := T90, p99 := T99, achieved := TA, vm_mb := Vm,
            vm_rss_mb := Rss, sink_rss_mb := Sink, events := E, dropped := D,
            overhead := O, load := L}} <- lists:zip(Untraced, Traced)]].

-spec share(undefined | number()) -> string().
share(undefined) -> "-";
share(S) -> io_lib:format("~.2f %", [100 * S]).

-spec summary([map()], [map()], map()) -> iolist().
summary(Untraced, Traced, #{dropped := Dropped, requests := Requests}) ->
    Med = fun(Ws, K) -> tiers_bench:median([maps:get(K, W) || W <- Ws]) end,
    Ratio = fun(K) -> tiers_bench:median([maps:get(K, T) / maps:get(K, U)
                                          || {U, T} <- lists:zip(Untraced, Traced)]) end,
    First = hd(Traced),
    Last = lists:last(Traced),
    io_lib:format("Medians of the windows: p50 ~.3f ms untraced, ~.3f ms with tiers "
                  "(~.3fx, the median of the windows' ratios); p99 ~.3f / ~.3f ms (~.3fx); "
                  "achieved ~.1f / ~.1f req/s. Memory with tiers, first window to last: VM "
                  "~.1f to ~.1f MB (resident ~.1f to ~.1f MB), sink resident ~.1f to ~.1f MB. "
                  "The report: ~b requests recorded, ~b dropped; the ring's drops ~b; "
                  "failed requests ~b untraced, ~b with tiers.~n",
                  [Med(Untraced, p50), Med(Traced, p50), Ratio(p50), Med(Untraced, p99),
                   Med(Traced, p99), Ratio(p99), Med(Untraced, achieved),
                   Med(Traced, achieved), maps:get(vm_mb, First), maps:get(vm_mb, Last),
                   maps:get(vm_rss_mb, First), maps:get(vm_rss_mb, Last),
                   maps:get(sink_rss_mb, First), maps:get(sink_rss_mb, Last), Requests,
                   Dropped, maps:get(ring_drops, Last),
                   lists:sum([F || #{failed := F} <- Untraced]),
                   lists:sum([F || #{failed := F} <- Traced])]).
