%%% @doc Where tiers' cost goes at rate (`make bench-tiers-parts'): the
%%% synthetic service of {@link tiers_bench} offered a fixed rate, open
%%% loop, with tiers on and each of their parts turned off in turn, the
%%% variants interleaved over the rounds:
%%%
%%% <ul>
%%% <li>`untraced': kprof runs, no tiers;</li>
%%% <li>`tiers': everything on (kprof:start_tiers/2, its defaults);</li>
%%% <li>`no ring writes': the tracer is an erl_tracer NIF that does nothing
%%%     (bench/null_tracer.erl), with the same flags and patterns: the VM
%%%     still dispatches every event, and nothing of it is written; the
%%%     request markers' records, which the request path writes itself, still
%%%     are (2 a request);</li>
%%% <li>`no procs': the flags without `procs' (no spawn, spawned or exit
%%%     events);</li>
%%% <li>`no tier patterns': the tier functions' patterns off (the request
%%%     markers' stay);</li>
%%% <li>`sampled out': tiers with `sample => 0.0001': what a request that
%%%     the sample leaves out still pays (the flags, and at each tier call
%%%     the VM's dispatch to the tracer before the match spec fails);</li>
%%% <li>`no guard': kprof_guard disarmed (no check every 50 ms);</li>
%%% <li>`no server poll': the tiers server suspended (no poll of the sink's
%%%     rows every second);</li>
%%% <li>`no sink': the guard disarmed and the sink stopped (SIGSTOP) for the
%%%     drive: it neither wakes nor reads; it reads the
%%%     ring after (compare with `no guard');</li>
%%% <li>`drain_1ms': tiers, the sink draining the rings every millisecond
%%%     (`{ring_wait_max, 1}'), as it did before its drains were paced
%%%     (port/ring/ring_pace.c);</li>
%%% <li>`token only': no tiers; each request sets a seq_trace label as
%%%     kprof:request/2 does: what the token costs the messages alone;</li>
%%% <li>`sink SCHED_BATCH': tiers, the sink's OS process under the Linux
%%%     policy that never preempts a running thread when it wakes (chrt -b):
%%%     whether the sink's wake-ups cost the service's
%%%     latency.</li>
%%% </ul>
%%%
%%% Per variant: latency p50 and p99 (medians of the rounds' own) and their
%%% ratios to the untraced run of the same round (medians), the VM's and the
%%% sink's CPU per request (utime + stime from /proc), trace events per
%%% request (the sink's count). The breakdown: each part's cost is the
%%% `tiers' row less the row with that part off. Rewrites the section "Tiers:
%%% where the time goes" of bench/RESULTS.md. Not a test: nothing fails on
%%% a number.
-module(tiers_parts).

-export([main/1]).

-define(TIERS, [{http, [{tiers_bench, http, 1}]}, {db, [{tiers_bench, db_query, 1}]},
                {templating, [{tiers_bench, tpl_render, 1}]}]).
-define(VARIANTS, [untraced, tiers, drain_1ms, no_ring, no_procs, no_patterns, sampled_out,
                   no_guard, no_poll, no_sink, token, sink_batch]).
%% `sampled_out': a request in ten thousand traced, what the others still pay.
-define(SAMPLED_OUT, 0.0001).
-define(SECTION, "Tiers: where the time goes").

%% @doc `main([Rate, Seconds, Rounds, ResultsFile])', all strings (from
%% the Makefile).
-spec main([string()]) -> no_return().
main([Rate0, Seconds0, Rounds0, Results]) ->
    [Rate, Seconds, Rounds] = [list_to_integer(A) || A <- [Rate0, Seconds0, Rounds0]],
    logger:set_handler_config(default, level, error),
    ok = kprof:start(),
    ok = tiers_bench:start_service(),
    true = null_tracer:loaded(),
    Load0 = overhead_bench:load_average(),
    io:format("tiers parts: ~b req/s offered, ~b s per variant, ~b round(s); load average ~s~n",
              [Rate, Seconds, Rounds, Load0]),
    %% A first start opens the ring: from then on every variant runs with
    %% the sink reading it, paced, as after any tiers session.
    run(tiers, Rate, 1),
    Runs = lists:append([round(Rate, Seconds) || _ <- lists:seq(1, Rounds)]),
    Rows = [row(V, [R || {V1, R} <- Runs, V1 =:= V]) || V <- ?VARIANTS],
    Closed = closed(Rounds),
    Load1 = overhead_bench:load_average(),
    Text = [io_lib:format("`make bench-tiers-parts`: the synthetic service of bench-tiers "
                          "(bench/tiers_parts.erl), ~b req/s offered open loop, ~b s per "
                          "variant, ~b rounds, the variants interleaved in each round. Load "
                          "average before / after: ~s / ~s.~n~n",
                          [Rate, Seconds, Rounds, Load0, Load1]),
            table(Rows), "\n", breakdown(Rows), "\n", closed_table(Closed), "\n", notes()],
    io:put_chars(Text),
    ok = overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

%% One round: every variant once, each with its ratios to the round's untraced run.
-spec round(pos_integer(), pos_integer()) -> [{atom(), map()}].
round(Rate, Seconds) ->
    Rs = [{V, run(V, Rate, Seconds)} || V <- ?VARIANTS],
    {untraced, Base} = lists:keyfind(untraced, 1, Rs),
    [{V, R#{p50_ratio => P50 / maps:get(p50, Base), p99_ratio => P99 / maps:get(p99, Base)}}
     || {V, R = #{p50 := P50, p99 := P99}} <- Rs].

-spec run(atom(), pos_integer(), pos_integer()) -> map().
run(V, Rate, Seconds) ->
    setup(V),
    #{trace_events := E0} = kprof:sink_stats(),
    Sink0 = tiers_bench:sink_cpu(),
    Vm0 = tiers_bench:vm_cpu(),
    %% `no sink': stopped for the drive only (a sink stopped for good would
    %% outlive a crash of this VM).
    R = try
            _ = V =:= no_sink andalso sink_signal("STOP"),
            tiers_bench:drive(Rate, Seconds, request_fun(V))
        after
            V =:= no_sink andalso sink_signal("CONT")
        end,
    Sink1 = tiers_bench:sink_cpu(),
    Vm1 = tiers_bench:vm_cpu(),
    teardown(V),
    {synced, _} = kprof_sink:command(sync, 60000),
    #{trace_events := E1} = kprof:sink_stats(),
    #{requests := N, latencies := Lat, achieved := Achieved} = R,
    #{p50 => tiers_bench:pct(Lat, 0.5) / 1.0e6, p99 => tiers_bench:pct(Lat, 0.99) / 1.0e6,
      achieved => Achieved, vm_us => 1.0e6 * (Vm1 - Vm0) / N,
      sink_us => 1.0e6 * (Sink1 - Sink0) / N, events => (E1 - E0) / N}.

%%%%%%%%%%%%%%%%%%%
%%% CLOSED LOOP %%%
%%%%%%%%%%%%%%%%%%%

%% One process makes the service's requests one after the other, with no
%% work in the tiers (their messages and tracing only), each variant in
%% turn, rounds interleaved: the VM's CPU per request (/proc; the servers'
%% and the wake-ups' included), the median of the rounds.
-define(CLOSED, [untraced, token, tiers, no_ring, no_procs, no_patterns, sampled_out]).
-define(CLOSED_N, 50000).

-spec closed(pos_integer()) -> [{atom(), float(), float()}].
closed(Rounds) ->
    ok = tiers_bench:work(false),
    Runs = [{V, closed_run(V)} || _ <- lists:seq(1, Rounds), V <- ?CLOSED],
    ok = tiers_bench:work(true),
    [{V, tiers_bench:median([Us || {V1, {Us, _}} <- Runs, V1 =:= V]),
      tiers_bench:median([E || {V1, {_, E}} <- Runs, V1 =:= V])} || V <- ?CLOSED].

-spec closed_run(atom()) -> {float(), float()}.
closed_run(V) ->
    setup(V),
    Request = request_fun(V),
    #{trace_events := E0} = kprof:sink_stats(),
    Vm0 = tiers_bench:vm_cpu(),
    _ = [Request({page, I rem 4}, fun() -> tiers_bench:http(I) end)
         || I <- lists:seq(1, ?CLOSED_N)],
    Vm1 = tiers_bench:vm_cpu(),
    teardown(V),
    {synced, _} = kprof_sink:command(sync, 60000),
    #{trace_events := E1} = kprof:sink_stats(),
    {1.0e6 * (Vm1 - Vm0) / ?CLOSED_N, (E1 - E0) / ?CLOSED_N}.

-spec closed_table([{atom(), float(), float()}]) -> iolist().
closed_table(Closed) ->
    {untraced, Base, _} = lists:keyfind(untraced, 1, Closed),
    [io_lib:format("Closed loop: one process makes ~b requests of the service one after the "
                   "other, no work in the tiers (two gen_server calls a request, in its own "
                   "process), each variant in turn; the VM's CPU per request, medians of the "
                   "rounds:~n~n", [?CLOSED_N]),
     "| variant | VM CPU us/req | more than untraced | events/req | per event ns |
"
     "|---|--:|--:|--:|--:|
",
     [io_lib:format("| ~s | ~.2f | ~.2f | ~.2f | ~s |~n",
                    [name(V), Us, Us - Base, E,
                     case E > 0 of
                         true -> integer_to_list(round(1000 * (Us - Base) / E));
                         false -> "-"
                     end])
      || {V, Us, E} <- Closed]].

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% TURNING PARTS OFF %%%%%%%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

-spec setup(atom()) -> ok.
setup(untraced) ->
    ok;
setup(token) ->
    ok;
setup(tiers) ->
    ok = kprof:start_tiers(?TIERS, #{});
setup(sampled_out) ->
    ok = kprof:start_tiers(?TIERS, #{sample => ?SAMPLED_OUT});
setup(no_ring) ->
    setup(tiers),
    retrace({tracer, null_tracer, []}, [call, arity, return_to, procs]);
setup(no_procs) ->
    setup(tiers),
    {tracer, {M, S}} = erlang:trace_info(new, tracer),
    retrace({tracer, M, S}, [call, arity, return_to]);
setup(no_patterns) ->
    setup(tiers),
    %% The guard would put them back (it takes a pattern gone for a reload).
    ok = kprof_guard:watch_patterns(tiers, []),
    [erlang:trace_pattern(MFA, false, [local]) || {_, [MFA]} <- ?TIERS],
    ok;
setup(no_guard) ->
    setup(tiers),
    kprof_guard:disarm(tiers);
setup(no_poll) ->
    setup(tiers),
    sys:suspend(kprof_tiers);
setup(no_sink) ->
    setup(no_guard);
setup(sink_batch) ->
    setup(tiers),
    sink_policy("-b");
setup(drain_1ms) ->
    setup(tiers),
    ok = kprof_sink:command({ring_wait_max, 1}, 5000).

-spec teardown(atom()) -> ok.
teardown(V) when V =:= untraced; V =:= token ->
    ok;
teardown(no_poll) ->
    sys:resume(kprof_tiers),
    teardown(tiers);
teardown(sink_batch) ->
    sink_policy("-o"),
    teardown(tiers);
teardown(drain_1ms) ->
    ok = kprof_sink:command({ring_wait_max, 16}, 5000),
    teardown(tiers);
teardown(_) ->
    ok = kprof:stop_tiers().

%% Every process's flags off, then these with this tracer (erlang:trace/3
%% with `false' on `all' clears the new processes' flags too).
-spec retrace(tuple(), [atom()]) -> ok.
retrace(Tracer, Flags) ->
    _ = erlang:trace(all, false, [all]),
    _ = erlang:trace(all, true, [Tracer | Flags]),
    ok.

%% The sink's scheduling policy: chrt -b (SCHED_BATCH) or -o (SCHED_OTHER).
-spec sink_policy(string()) -> ok.
sink_policy(Policy) ->
    #{os_pid := P} = kprof_sink:info(),
    _ = os:cmd("chrt " ++ Policy ++ " -p 0 " ++ integer_to_list(P)),
    ok.

-spec sink_signal(string()) -> true.
sink_signal(Sig) ->
    #{os_pid := P} = kprof_sink:info(),
    _ = os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(P)),
    true.

%% The token variant: a label as kprof:request/2 sets it, nothing traced.
-spec request_fun(atom()) -> fun((term(), fun(() -> term())) -> term()).
request_fun(token) ->
    fun(_Id, Fun) ->
            Old = seq_trace:get_token(),
            _ = seq_trace:set_token(label, erlang:unique_integer([positive])),
            try Fun() after seq_trace:set_token(Old) end
    end;
request_fun(_) ->
    tiers_bench:request_fun().

%%%%%%%%%%%%%%
%%% TABLES %%%
%%%%%%%%%%%%%%

-spec row(atom(), [map()]) -> map().
row(V, Runs) ->
    Med = fun(K) -> tiers_bench:median([maps:get(K, R) || R <- Runs]) end,
    maps:from_list([{variant, V} | [{K, Med(K)} || K <- [p50, p99, p50_ratio, p99_ratio,
                                                          achieved, vm_us, sink_us, events]]]).

-spec table([map()]) -> iolist().
table(Rows) ->
    ["| variant | p50 ms | p99 ms | p50 / untraced | p99 / untraced | achieved/s "
     "| VM CPU us/req | sink CPU us/req | events/req |\n"
     "|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
     [io_lib:format("| ~s | ~.3f | ~.3f | ~.3f | ~.3f | ~.1f | ~.1f | ~.1f | ~.2f |~n",
                    [name(V), P50, P99, R50, R99, A, Vm, Sink, E])
      || #{variant := V, p50 := P50, p99 := P99, p50_ratio := R50, p99_ratio := R99,
           achieved := A, vm_us := Vm, sink_us := Sink, events := E} <- Rows]].

%% Each part: the tiers row less the row with it off (the token: its row
%% less untraced; the sink: `no guard' less `no sink').
-spec breakdown([map()]) -> iolist().
breakdown(Rows) ->
    Get = fun(V) -> hd([R || R = #{variant := V1} <- Rows, V1 =:= V]) end,
    Parts = [{"ring writes of trace events (the NIF's records)", Get(tiers), Get(no_ring)},
             {"procs events (spawn, spawned, exit)", Get(tiers), Get(no_procs)},
             {"tier patterns (3 calls and their return_tos)", Get(tiers), Get(no_patterns)},
             {"the events of traced requests (sample 1 against 0.0001)", Get(tiers),
              Get(sampled_out)},
             {"tier calls outside a sampled request (the VM asks the tracer, then the "
              "match spec fails)", Get(sampled_out), Get(no_patterns)},
             {"kprof_guard's checks", Get(tiers), Get(no_guard)},
             {"the tiers server's poll", Get(tiers), Get(no_poll)},
             {"the sink (its paced reads, its CPU)", Get(no_guard), Get(no_sink)},
             {"drains every millisecond instead of paced", Get(drain_1ms), Get(tiers)},
             {"the seq_trace token on messages", Get(token), Get(untraced)},
             {"all of tiers", Get(tiers), Get(untraced)}],
    ["Each part's cost: the row with everything on less the row with that part off "
     "(the sink: `no guard' less `no sink'; the token: `token only' less `untraced'); "
     "ratio points: the difference of the p50 and p99 ratios to untraced.\n\n"
     "| part | VM CPU us/req | sink CPU us/req | events/req | p50 ratio points "
     "| p99 ratio points |\n"
     "|---|--:|--:|--:|--:|--:|\n",
     [io_lib:format("| ~s | ~.1f | ~.1f | ~.2f | ~s | ~s |~n",
                    [Name, vm_us(On) - vm_us(Off), sink_us(On) - sink_us(Off),
                     events(On) - events(Off), signed(p50r(On) - p50r(Off)),
                     signed(p99r(On) - p99r(Off))])
      || {Name, On, Off} <- Parts]].

-spec signed(float()) -> string().
signed(X) when X >= 0 -> "+" ++ float_to_list(X, [{decimals, 3}]);
signed(X) -> float_to_list(X, [{decimals, 3}]).

vm_us(#{vm_us := X}) -> X.
sink_us(#{sink_us := X}) -> X.
events(#{events := X}) -> X.
p50r(#{p50_ratio := X}) -> X.
p99r(#{p99_ratio := X}) -> X.

-spec name(atom()) -> string().
name(untraced) -> "untraced";
name(tiers) -> "tiers";
name(no_ring) -> "no ring writes of events (null tracer NIF; the markers' still)";
name(no_procs) -> "no procs flag";
name(no_patterns) -> "no tier patterns";
name(sampled_out) -> "tiers, sample 0.0001 (almost every request sampled out)";
name(no_guard) -> "no guard";
name(no_poll) -> "no server poll";
name(no_sink) -> "no guard, sink stopped";
name(token) -> "token only, nothing traced";
name(sink_batch) -> "tiers, the sink at SCHED_BATCH";
name(drain_1ms) -> "tiers, the rings drained every millisecond (not paced)".

-spec notes() -> iolist().
notes() ->
    "The machine is shared: the CPU per request is the steadier figure (the work is a loop "
    "of fixed length); latency ratios at a load above the core count are mostly other "
    "jobs' time. `no sink': the sink's CPU for the drive is 0 (it reads the ring after).\n".
