%%% @doc EUnit: kprof:calls/2 and kprof_calls, end to end through the ring:
%%% exact counts across processes, `max' exact (the NIF's budget), `ms',
%%% time, errors that change nothing, busy both ways, nothing left after a
%%% session, the caller's death.
-module(kprof_calls_tests).

-include_lib("eunit/include/eunit.hrl").

%% The traced workload: called by this module's workers only.
-export([leaf_a/1, leaf_b/1, untraced/1]).

-define(A, {?MODULE, leaf_a, 1}).
-define(B, {?MODULE, leaf_b, 1}).

calls_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [{"exact counts per function across processes", {timeout, 60, fun exact_counts/0}},
      {"max stops it with exactly max calls counted", {timeout, 60, fun max_exact/0}},
      {"ms stops it; calls finished before are all counted", {timeout, 60, fun ms_stops/0}},
      {"time => true: call_time per function", {timeout, 60, fun with_time/0}},
      {"a printed table, keyword options, kprof:calls/1,2", {timeout, 60, fun printed/0}},
      {"bad specs and options: errors, nothing traced", {timeout, 60, fun errors/0}},
      {"0 calls: {ok, []}", {timeout, 60, fun no_calls/0}},
      {"busy while tiers run; tiers and flame busy while calls runs",
       {timeout, 60, fun busy/0}},
      {"the caller dies: flags, patterns and call_time off", {timeout, 60, fun caller_dies/0}},
      {"the sink dies: an error, everything off", {timeout, 60, fun sink_dies/0}},
      {"the port tracer: the same counts, max at least", {timeout, 60, fun port_tracer/0}}]}.

setup() ->
    logger:set_handler_config(default, level, error),
    ok = kprof_test_util:start(#{}),
    ok.

cleanup(_) ->
    _ = kprof:stop_tiers(),
    ok = kprof:stop(),
    application:unset_env(kprof, tracer),
    logger:set_handler_config(default, level, all),
    flush().

flush() ->
    receive _ -> flush() after 0 -> ok end.

%%% The workload

leaf_a(X) -> X + 1.
leaf_b(X) -> X * 2.
untraced(X) -> X.

%% A process that waits until it is call traced (the session's flags on),
%% makes N rounds of 3 leaf_a and 1 leaf_b, says so, and waits to be told to go.
worker(Parent, N) ->
    spawn_link(fun() ->
                       ok = kprof_test_util:wait_until(fun traced/0, 30000),
                       rounds(N),
                       Parent ! {done, self()},
                       receive stop -> ok end
               end).

traced() ->
    {flags, F} = kprof_test_util:trace_info(self(), flags),
    lists:member(call, F).

rounds(0) -> ok;
rounds(N) ->
    _ = ?MODULE:leaf_a(?MODULE:leaf_a(?MODULE:leaf_a(N))),
    _ = ?MODULE:leaf_b(N),
    _ = ?MODULE:untraced(N),
    rounds(N - 1).

%% A process calling leaf_a for ever, from the moment it is traced.
spinner() ->
    spinner(fun spin/1).

spinner(Loop) ->
    spawn(fun() -> ok = kprof_test_util:wait_until(fun traced/0, 30000), Loop(0) end).

spin(N) ->
    _ = ?MODULE:leaf_a(N),
    spin(N + 1).

%% As spin/1, with a 1 ms pause every 64 calls, as real work has now and
%% then. For the port tracer: a loop of nothing but calls makes events
%% faster than the VM hands them to any port (doc/guard.md), and the sink's
%% max alert then waits behind that backlog: in 1 session of 12 the guard's
%% max_lag_ms (port_stalled) ended it first, as {aborted, overload}. That
%% flood is the guard's case (kprof_guard_tests); this one is max's.
spin_paced(N) ->
    _ = ?MODULE:leaf_a(N),
    _ = N band 63 =:= 0 andalso receive after 1 -> ok end,
    spin_paced(N + 1).

%% A session in a process of its own; its result comes as {calls, Pid, R}.
session(Spec, Opts) ->
    Self = self(),
    spawn(fun() -> Self ! {calls, self(), kprof_calls:run(Spec, Opts)} end).

result(P) ->
    receive {calls, P, R} -> R after 60000 -> error(no_result) end.

%% Nothing of a session is left: its trace session (OTP 27+), flags,
%% patterns, call_time, the budget, the guard.
nothing_left(Pids) ->
    ?assertEqual([], kprof_test_util:kprof_sessions()),
    ?assertEqual({flags, []}, kprof_test_util:trace_info(new, flags)),
    [?assertEqual({P, {flags, []}}, {P, kprof_test_util:trace_info(P, flags)}) || P <- Pids,
                                                                    is_process_alive(P)],
    [?assertEqual({MFA, {traced, false}}, {MFA, kprof_test_util:trace_info(MFA, traced)}) || MFA <- [?A, ?B]],
    [?assertEqual({MFA, {call_time, false}}, {MFA, kprof_test_util:trace_info(MFA, call_time)})
     || MFA <- [?A, ?B]],
    ?assertMatch(#{gen := 0}, kprof_tracer:budget()),
    ?assertMatch(#{armed := []}, kprof:status()),
    %% No mode holds the guard's claim either (kprof_guard:claim/1).
    ?assertEqual(#{}, case kprof_records:get(kprof_guard) of
                          #{claims := Claims} -> Claims;
                          undefined -> #{}
                      end).

%% A calls session is armed in the guard.
calls_running() ->
    lists:member(calls, maps:get(armed, kprof:status())).

stop_all(Ps) ->
    [begin unlink(P), exit(P, kill) end || P <- Ps],
    ok.

%%% Tests

%% 4 processes, 500 rounds each: 6000 leaf_a, 2000 leaf_b, counted exactly;
%% the session stops at max = their sum, with nothing over it.
exact_counts() ->
    N = 500,
    S = session([?A, ?B, {?MODULE, rounds, 1}], #{max => 4 * N * 4 + 4 * (N + 1), ms => 60000,
                                                    print => false}),
    Ws = [worker(self(), N) || _ <- lists:seq(1, 4)],
    {ok, Rows, Sum} = result(S),
    [receive {done, W} -> ok end || W <- Ws],
    ?assertEqual([#{mfa => ?A, calls => 4 * N * 3},
                  #{mfa => {?MODULE, rounds, 1}, calls => 4 * (N + 1)},
                  #{mfa => ?B, calls => 4 * N}], Rows),
    ?assertMatch(#{stopped := max, over_max := 0, functions := 3, tracer := ring}, Sum),
    ?assertEqual(4 * N * 4 + 4 * (N + 1), maps:get(calls, Sum)),
    nothing_left(Ws),
    stop_all(Ws).

%% A spinner never stops: max stops the session with exactly max counted.
max_exact() ->
    Sp = spinner(),
    T0 = erlang:monotonic_time(microsecond),
    {ok, Rows, Sum} = kprof_calls:run(?A, #{max => 20000, ms => 60000, print => false}),
    Wall = erlang:monotonic_time(microsecond) - T0,
    ?assertEqual([#{mfa => ?A, calls => 20000}], Rows),
    ?assertMatch(#{stopped := max, calls := 20000}, Sum),
    ?assert(maps:get(elapsed_us, Sum) =< Wall),
    nothing_left([Sp]),
    exit(Sp, kill).

%% ms stops a session that max would not: the time it took is at least ms
%% and at most the caller's wall time; the spinner's calls are all counted
%% (none over a budget: the sink's count equals what the spinner made).
ms_stops() ->
    Sp = spinner(),
    T0 = erlang:monotonic_time(microsecond),
    {ok, [#{mfa := ?A, calls := C}], Sum} =
        kprof_calls:run(?A, #{ms => 300, max => infinity, print => false}),
    Wall = erlang:monotonic_time(microsecond) - T0,
    ?assertMatch(#{stopped := ms, over_max := 0}, Sum),
    ?assert(C > 0),
    Elapsed = maps:get(elapsed_us, Sum),
    ?assert(Elapsed >= 300000),
    ?assert(Elapsed =< Wall),
    nothing_left([Sp]),
    exit(Sp, kill),
    %% Work that ends before ms: every call of it counted, the session runs
    %% its ms. The ms is 20 times the workload's own time, untraced (and
    %% 200 ms at least).
    {Us, ok} = timer:tc(fun() -> rounds(2000) end),
    Ms = max(200, 20 * Us div 1000),
    S = session([?A, ?B], #{ms => Ms, max => infinity, print => false}),
    W = worker(self(), 2000),
    {ok, Rows, Sum2} = result(S),
    receive {done, W} -> ok end,
    ?assertEqual([#{mfa => ?A, calls => 6000}, #{mfa => ?B, calls => 2000}], Rows),
    ?assertMatch(#{stopped := ms}, Sum2),
    ?assert(maps:get(elapsed_us, Sum2) >= Ms * 1000),
    nothing_left([W]),
    stop_all([W]).

with_time() ->
    N = 300,
    S = session([?A, ?B], #{max => 4 * N, time => true, print => false}),
    W = worker(self(), N),
    {ok, Rows, Sum} = result(S),
    receive {done, W} -> ok end,
    ?assertMatch([#{mfa := ?A, calls := 900, time_calls := 900, time_us := _},
                  #{mfa := ?B, calls := 300, time_calls := 300, time_us := _}], Rows),
    [?assert(is_integer(T) andalso T >= 0) || #{time_us := T} <- Rows],
    ?assertMatch(#{stopped := max, over_max := 0}, Sum),
    nothing_left([W]),
    stop_all([W]).

printed() ->
    Self = self(),
    Text = kprof_test_util:capture_io(
             fun() ->
                     S = spawn(fun() -> Self ! {r, kprof:calls([?A, ?B], [{max, 400}, {ms, 60000}])} end),
                     W = worker(self(), 100),
                     R = receive {r, X} -> X after 60000 -> timeout end,
                     receive {done, W} -> ok end,
                     stop_all([W]),
                     Self ! {result, S, R}
             end),
    {ok, Rows} = receive {result, _, R} -> R after 0 -> error(no_result) end,
    ?assertEqual([#{mfa => ?A, calls => 300}, #{mfa => ?B, calls => 100}], Rows),
    %% (The session's process prints to its group leader: the capture's.)
    ?assertMatch({match, _}, re:run(Text, "kprof calls: 2 functions, 400 calls in [0-9.]+ s \\(stopped: max\\)\n"
                                          " +calls +% +function\n +300 +75.0 +kprof_calls_tests:leaf_a/1\n")),
    Out = kprof_test_util:capture_io(fun() -> Self ! {r1, kprof:calls(?A, #{ms => 50})} end),
    receive {r1, {ok, []}} -> ok after 0 -> error(no_result) end,
    ?assertMatch({match, _}, re:run(Out, "kprof calls: 0 functions, 0 calls in [0-9.]+ s \\(stopped: ms\\)")),
    Table = iolist_to_binary(kprof_calls:format(Rows, #{calls => 400, functions => 2,
                                                        elapsed_us => 1002000, stopped => max,
                                                        over_max => 0, top => 1})),
    ?assertEqual(<<"kprof calls: 2 functions, 400 calls in 1.002 s (stopped: max)\n"
                   "    calls      %  function\n"
                   "      300   75.0  kprof_calls_tests:leaf_a/1\n"
                   "  ... 1 more functions, 100 calls (all in the result)\n">>, Table),
    %% names => elixir: the functions as Elixir names them.
    ExTable = iolist_to_binary(kprof_calls:format(Rows, #{calls => 400, functions => 2,
                                                          elapsed_us => 1002000, stopped => max,
                                                          over_max => 0, top => 1,
                                                          names => elixir})),
    ?assertNotEqual(nomatch, binary:match(ExTable, <<"  :kprof_calls_tests.leaf_a/1\n">>)),
    ?assertEqual(<<"kprof calls: 0 functions, 12,345,678 calls in 12.0 s (stopped: ABORTED: overload)\n"
                   "    calls      %  function\n">>,
                 iolist_to_binary(kprof_calls:format([], #{calls => 12345678, functions => 0,
                                                           elapsed_us => 12000000,
                                                           stopped => {aborted, overload}}))),
    nothing_left([]).

errors() ->
    Bad = [{{'_', f, 1}, {bad_spec, {'_', f, 1}}},
           {"lists", {bad_spec, "lists"}},
           {[], {bad_spec, []}},
           {[?A | x], {bad_spec, [?A | x]}},
           {[?A, {lists, seq, 256}], {bad_spec, {lists, seq, 256}}},
           {{lists, "seq", 2}, {bad_spec, {lists, "seq", 2}}},
           {{kprof_tracer, '_', '_'}, {bad_spec, {kprof_tracer, '_', '_'}}},
           {{kprof_no_such_module, f, 1}, {no_functions, {kprof_no_such_module, f, 1}}},
           {[?A, {?MODULE, leaf_a, 2}], {no_functions, {?MODULE, leaf_a, 2}}}],
    [?assertEqual({Spec, {error, Why}}, {Spec, kprof:calls(Spec, #{})}) || {Spec, Why} <- Bad],
    BadOpts = [{#{ms => 0}, {bad_option, ms, 0}},
               {#{max => -1}, {bad_option, max, -1}},
               {#{ms => infinity, max => infinity}, {bad_option, ms, infinity}},
               {#{time => yes}, {bad_option, time, yes}},
               {#{top => x}, {bad_option, top, x}},
               {#{max_lag_ms => 0}, {bad_option, max_lag_ms, 0}},
               {#{nope => 1, zap => 2}, {unknown_options, [nope, zap]}},
               {[{ms, 1} | x], {bad_options, [{ms, 1} | x]}},
               {[x], {bad_options, [x]}},
               {#{sample => 1.0}, {unknown_options, [sample]}}],
    [?assertEqual({O, {error, Why}}, {O, kprof:calls(?A, O)}) || {O, Why} <- BadOpts],
    [?assertEqual({O, {error, Why}}, {O, kprof_calls:run(?A, O)})
     || {O, Why} <- BadOpts, is_map(O)],
    nothing_left([]).

no_calls() ->
    {ok, [], Sum} = kprof_calls:run(?A, #{ms => 50, print => false}),
    ?assertMatch(#{stopped := ms, calls := 0, functions := 1}, Sum),
    %% The session's own calls (it lists kprof's processes with
    %% lists:prefix/2) are not counted.
    ?assertMatch({ok, [], #{calls := 0}}, kprof_calls:run({lists, prefix, 2}, #{ms => 50, print => false})),
    nothing_left([]).

busy() ->
    ok = kprof:start_tiers([{a, [?B]}], #{}),
    NewFlags = kprof_test_util:trace_info(new, flags),
    ?assertEqual({error, {busy, tiers}}, kprof:calls(?A, #{ms => 50})),
    %% Nothing of the tiers changed, nothing of calls set.
    ?assertEqual(NewFlags, kprof_test_util:trace_info(new, flags)),
    ?assertEqual({traced, false}, kprof_test_util:trace_info(?A, traced)),
    ?assertEqual({traced, local}, kprof_test_util:trace_info(?B, traced)),
    ?assertMatch(#{armed := [tiers]}, kprof:status()),
    ok = kprof:stop_tiers(),
    %% A session running: the tiers and a flame capture are refused.
    S = session(?A, #{ms => 60000, max => 1, print => false}),
    ok = kprof_test_util:wait_until(fun calls_running/0, 10000),
    ?assertEqual({error, {busy, calls}}, kprof:start_tiers([{a, [?B]}], #{})),
    ?assertEqual({error, {busy, calls}}, kprof:flame_capture(?B, 1, #{timeout => 100})),
    ?assertEqual({error, {busy, calls}}, kprof:calls(?B, #{ms => 50})),
    ?assertEqual({traced, false}, kprof_test_util:trace_info(?B, traced)),
    %% One call ends it.
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(?A, traced) =:= {traced, local} end, 10000),
    spawn(fun() -> ok = kprof_test_util:wait_until(fun traced/0, 30000), ?MODULE:leaf_a(1) end),
    ?assertMatch({ok, [#{mfa := ?A, calls := 1}], #{stopped := max}}, result(S)),
    nothing_left([]).

%% The session's own process is killed: the guard (its owner's monitor) turns
%% everything off.
caller_dies() ->
    Sp = spinner(),
    S = session([?A, ?B], #{ms => 60000, max => infinity, time => true, print => false}),
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(?A, call_time) =/= {call_time, false} end,
                                    10000),
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(Sp, flags) =/= {flags, []} end, 10000),
    exit(S, kill),
    ok = kprof_test_util:wait_until(fun() -> not calls_running() end, 10000),
    %% The spinner's next call drops a stale tracer, if it still had one.
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(Sp, flags) =:= {flags, []} end, 10000),
    nothing_left([Sp]),
    ?assertMatch(#{aborted := #{kind := owner_down}}, kprof:status()),
    exit(Sp, kill).

%% The sink killed mid-session: the guard aborts it (sink_down), the session
%% says its counts are gone, nothing is left traced.
sink_dies() ->
    Sp = spinner(),
    S = session(?A, #{ms => 60000, max => infinity, print => false}),
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(Sp, flags) =/= {flags, []} end, 10000),
    ok = kprof_sink:restart(test),
    ?assertEqual({error, {sink, {restarted, {aborted, sink_down}}}}, result(S)),
    ok = kprof_test_util:wait_until(fun() -> kprof_test_util:trace_info(Sp, flags) =:= {flags, []} end, 10000),
    nothing_left([Sp]),
    exit(Sp, kill),
    %% The new sink counts the next session.
    W = worker(self(), 10),
    S2 = session(?A, #{max => 30, print => false}),
    ?assertMatch({ok, [#{mfa := ?A, calls := 30}], #{stopped := max}}, result(S2)),
    receive {done, W} -> ok end,
    stop_all([W]).

%% kprof started with the port tracer: every call counted as with the ring;
%% max is polled (the counts may pass it, none is lost).
port_tracer() ->
    ok = kprof:stop(),
    ok = kprof_test_util:start(#{tracer => port}),
    N = 200,
    S = session([?A, ?B], #{ms => 60000, max => 4 * N, print => false}),
    W = worker(self(), N),
    {ok, Rows, Sum} = result(S),
    receive {done, W} -> ok end,
    ?assertEqual([#{mfa => ?A, calls => 3 * N}, #{mfa => ?B, calls => N}], Rows),
    ?assertMatch(#{stopped := max, tracer := port, over_max := 0}, Sum),
    nothing_left([W]),
    stop_all([W]),
    Sp = spinner(fun spin_paced/1),
    {ok, [#{calls := C}], #{stopped := max}} = kprof_calls:run(?A, #{max => 5000, print => false}),
    ?assert(C >= 5000),
    nothing_left([Sp]),
    exit(Sp, kill).
