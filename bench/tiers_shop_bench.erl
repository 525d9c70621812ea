%%% @doc What tiers cost the example shop (`make bench-tiers-shop'):
%%% examples/shop (mochiweb, SQLite, a pool of gen_server workers) driven
%%% by its own load generator in the same node (shop_load: open loop, a
%%% connection per request), untraced and with tiers on its three tier
%%% modules as a user would set them (shop_demo:tiers/0 and tier_opts/0),
%%% and with the tiers on those modules' exported functions only (what the
%%% patterns on whole modules cost: every local call of a tier module is a
%%% call and a return_to), and with the sink draining the rings every
%%% millisecond instead of paced (`{ring_wait_max, 1}': what the pacing of
%%% port/ring/ring_pace.c saves), route by route, the modes interleaved over
%%% the rounds.
%%%
%%% Per route, rate and mode: latency p50 and p99 (medians of the rounds'
%%% own) and their ratios to the untraced run of the same round (medians),
%%% the rate achieved, the VM's CPU per request (utime + stime from /proc:
%%% the load generator's included, the same in both modes) and the sink's,
%%% the trace events per request (the sink's count). Rewrites the section
%%% "Tiers on the shop" of bench/RESULTS.md. Not a test: nothing fails on a
%%% number.
-module(tiers_shop_bench).

-export([main/1]).

-define(SECTION, "Tiers on the shop").
-define(MODES, [untraced, tiers, exports, drain_1ms]).

%% @doc `main([Cases, Seconds, Rounds, ResultsFile])', all strings (from the
%% Makefile); Cases: `Path@Rate' separated by commas.
-spec main([string()]) -> no_return().
main([Cases0, Seconds0, Rounds0, Results]) ->
    Cases = [case string:lexemes(C, "@") of
                 [Path, Rate] -> {Path, list_to_integer(Rate)}
             end || C <- string:lexemes(Cases0, ",")],
    Ms = 1000 * list_to_integer(Seconds0),
    Rounds = list_to_integer(Rounds0),
    logger:set_handler_config(default, level, error),
    ok = kprof:start(),
    {ok, #{port := Port}} = shop:start(#{}),
    Load0 = overhead_bench:load_average(),
    io:format("tiers shop bench: ~p, ~b ms per run, ~b round(s); load average ~s~n",
              [Cases, Ms, Rounds, Load0]),
    %% Warm-up: every route, then one tiers start (the sink's ring opened).
    [drive(Port, Path, 100, 1000) || {Path, _} <- Cases],
    ok = kprof:start_tiers(shop_demo:tiers(), shop_demo:tier_opts()),
    ok = kprof:stop_tiers(),
    Runs = [{C, M, run(M, Port, C, Ms)} || _ <- lists:seq(1, Rounds), C <- Cases, M <- ?MODES],
    Rows = [row(C, M, Runs) || C <- Cases, M <- ?MODES],
    ok = shop:stop(),
    Load1 = overhead_bench:load_average(),
    Text = [io_lib:format("`make bench-tiers-shop`: examples/shop with SQLite, its load "
                          "generator in the same node (shop_load, open loop, a connection per "
                          "request), untraced and with `kprof:start_tiers(shop_demo:tiers(), "
                          "shop_demo:tier_opts())` (three whole tier modules, the entry "
                          "`shop_http:handle/3`), and with the same tiers on those modules' exported "
                          "functions only, ~b s per run, ~b rounds, the modes "
                          "interleaved in each round. Load average before / after: "
                          "~s / ~s.~n~n", [Ms div 1000, Rounds, Load0, Load1]),
            table(Rows), "\n",
            "p50 and p99: medians of the rounds' own; the ratios: medians of each round's "
            "ratio to its untraced run. VM CPU holds the load generator's own work (the "
            "same in every mode). \"drained every ms\": the whole modules' tiers with the "
            "sink draining the rings every millisecond, as before its drains were paced "
            "(port/ring/ring_pace.c).\n"],
    io:put_chars(Text),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

-spec run(untraced | tiers | exports | drain_1ms, inet:port_number(),
          {string(), pos_integer()}, pos_integer()) ->
          map().
run(Mode, Port, {Path, Rate}, Ms) ->
    _ = Mode =/= untraced andalso (ok =:= kprof:start_tiers(tiers(Mode),
                                                              shop_demo:tier_opts())),
    ok = kprof_sink:command({ring_wait_max, case Mode of drain_1ms -> 1; _ -> 16 end}, 5000),
    #{trace_events := E0} = kprof:sink_stats(),
    Sink0 = tiers_bench:sink_cpu(),
    Vm0 = tiers_bench:vm_cpu(),
    R = drive(Port, Path, Rate, Ms),
    Vm1 = tiers_bench:vm_cpu(),
    Sink1 = tiers_bench:sink_cpu(),
    _ = Mode =/= untraced andalso (ok =:= kprof:stop_tiers()),
    {synced, _} = kprof_sink:command(sync, 60000),
    #{trace_events := E1} = kprof:sink_stats(),
    #{latency := #{p50 := P50, p99 := P99}, rate := Achieved, requests := N, ok := Ok} = R,
    #{p50 => P50, p99 => P99, achieved => Achieved, failed => N - Ok,
      vm_us => 1.0e6 * (Vm1 - Vm0) / max(1, N), sink_us => 1.0e6 * (Sink1 - Sink0) / max(1, N),
      events => (E1 - E0) / max(1, N)}.

%% The demo's tiers, or the same on each module's exported functions only.
-spec tiers(tiers | exports | drain_1ms) -> kprof_tiers:tiers().
tiers(Whole) when Whole =:= tiers; Whole =:= drain_1ms ->
    shop_demo:tiers();
tiers(exports) ->
    [{Name, [{M, F, A} || {M, '_', '_'} <- Specs, {F, A} <- M:module_info(exports),
                          F =/= module_info]}
     || {Name, Specs} <- shop_demo:tiers()].

-spec drive(inet:port_number(), string(), pos_integer(), pos_integer()) -> map().
drive(Port, Path, Rate, Ms) ->
    shop_load:run(#{port => Port, rate => Rate, duration_ms => Ms, paths => [{1, Path}],
                    concurrency => 500}).

%% A case and mode's medians, its ratios to untraced taken round by round.
-spec row({string(), pos_integer()}, atom(), [{term(), atom(), map()}]) -> map().
row(C, M, Runs) ->
    Mine = [R || {C1, M1, R} <- Runs, C1 =:= C, M1 =:= M],
    Base = [R || {C1, untraced, R} <- Runs, C1 =:= C],
    Med = fun(K) -> tiers_bench:median([maps:get(K, R) || R <- Mine]) end,
    Ratio = fun(K) -> tiers_bench:median([maps:get(K, R) / maps:get(K, B)
                                          || {R, B} <- lists:zip(Mine, Base)]) end,
    #{'case' => C, mode => M, p50 => Med(p50), p99 => Med(p99), p50_ratio => Ratio(p50),
      p99_ratio => Ratio(p99), achieved => Med(achieved), vm_us => Med(vm_us),
      sink_us => Med(sink_us), events => Med(events),
      failed => lists:sum([F || #{failed := F} <- Mine])}.

-spec mode_name(atom()) -> string().
mode_name(untraced) -> "untraced";
mode_name(tiers) -> "tiers (whole modules)";
mode_name(exports) -> "tiers (exported functions)";
mode_name(drain_1ms) -> "tiers (whole modules), drained every ms".

-spec table([map()]) -> iolist().
table(Rows) ->
    ["| route | offered/s | mode | p50 ms | p99 ms | p50 / untraced | p99 / untraced "
     "| achieved/s | VM CPU us/req | sink CPU us/req | events/req | failed |\n"
     "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
     [io_lib:format("| `~s` | ~b | ~s | ~.3f | ~.3f | ~.3f | ~.3f | ~.1f | ~.1f | ~.1f | ~.1f "
                    "| ~b |~n",
                    [Path, Rate, mode_name(M), P50, P99, R50, R99, A, Vm, Sink, E, F])
      || #{'case' := {Path, Rate}, mode := M, p50 := P50, p99 := P99, p50_ratio := R50,
           p99_ratio := R99, achieved := A, vm_us := Vm, sink_us := Sink, events := E,
           failed := F} <- Rows]].
