%%% @doc EUnit: the tracer NIF (kprof_tracer) and its ring, end to end: the
%%% tiers trace with it by default, the port tracer gives the same results
%%% (the whole tier suite is run again with it), a full ring is an alert
%%% and an abort, a ring that cannot be set up falls back to the port, and
%%% a tracer of an old session removes itself.
-module(kprof_tracer_tests).

-include_lib("eunit/include/eunit.hrl").

%% logger handler callback (other_tracers/0).
-export([log/2]).

-import(kprof_test_report, [report/0]).

-define(W, kprof_tiers_work).
-define(TIERS, [{a, [{?W, sleep_a, 1}]}, {b, [{?W, burn_a, 1}]}]).

tracer_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [{"the ring is the default tracer; nothing is left after stop", fun ring_default/0},
      {"the same requests, ring and port: the same calls and counts", fun same_as_port/0},
      {"a full ring: alert, tiers aborted, tracing off, reason in status",
       {timeout, 120, fun ring_full/0}},
      {"a ring the sink cannot make: the port, with a warning", fun fallback/0},
      {"rings bigger than /dev/shm has room for: smaller ones, a notice, the same counts",
       {timeout, 60, fun smaller_rings/0}},
      {"a tracer of an old session answers remove", fun stale/0},
      {"the tiers' generation drops spawn events, keeps exits; the next one has them",
       fun discard_spawns/0},
      {"the tiers' own tracers are no other tracer; a process of dbg's is",
       {timeout, 30, fun other_tracers/0}},
      {"max_events counts the ring's events from the start",
       {timeout, 60, fun ring_max_events/0}},
      {"requests moved between schedulers mid-request: every event once, each "
       "process's in order, a ring per scheduler", {timeout, 120, fun migrations/0}}]}.

%% More scheduler threads than rings, without kprof (a sink of the test's own).
shared_ring_test_() ->
    {timeout, 60, fun shared_ring/0}.

%% Every tier test again, traced through the sink's port.
port_tracer_test_() ->
    kprof_tiers_tests:port_tracer_suite().

setup() ->
    ?W:setup().

cleanup(Times) ->
    ?W:cleanup(Times),
    flush().

flush() ->
    receive _ -> flush() after 0 -> ok end.

requests(N, Id) ->
    ?W:run_requests(N, Id, fun() -> ?W:sleep_a(1), ?W:burn_a(200) end).

calls(#{rows := Rows}, Id) ->
    [#{tiers := Tiers, requests := N}] = [R || #{identity := I} = R <- Rows, I =:= Id],
    {N, [{T, C} || #{tier := T, calls := C} <- Tiers]}.

ring_default() ->
    ?assert(kprof_tracer:available()),
    ok = kprof:start_tiers(?TIERS, #{}),
    Self = self(),
    P = spawn_link(fun() -> requests(5, x), Self ! {done, self()}, receive stop -> ok end end),
    receive {done, P} -> ok end,
    ?assertMatch({tracer, {kprof_tracer, _}}, kprof_test_util:trace_info(P, tracer)),
    ?assertEqual({5, [{a, 5}, {b, 5}]}, calls(report(), x)),
    #{ring_records := Recs, ring_drops := 0, ring_unresolved := 0, ring_bad := 0,
      bytes := Bytes} = kprof:sink_stats(),
    ?assert(Recs >= 5 * 8),
    ?assert(Bytes < 2000),   % commands only: no trace message went to the port
    ok = kprof:stop_tiers(),
    ?assertEqual({flags, []}, kprof_test_util:trace_info(P, flags)),
    ?assertEqual({traced, false}, kprof_test_util:trace_info({?W, sleep_a, 1}, traced)),
    P ! stop.

%% The tiers read a process's exit of the procs flag, not its spawn or
%% spawned: their generation's enabled/3 discards those (kprof_tracer:
%% discard/2). A later generation (a new tracer session) is not affected.
discard_spawns() ->
    Kinds = fun() ->
                    {synced, _} = kprof_sink:command(sync, 10000),
                    maps:with([spawn, spawned, exit], maps:get(events, kprof:sink_stats()))
            end,
    Spawn = fun(N) ->
                    Self = self(),
                    [receive {'DOWN', _, process, _, normal} -> ok end
                     || _ <- [spawn_monitor(fun() -> Self =:= self() end)
                              || _ <- lists:seq(1, N)]],
                    ok
            end,
    ok = kprof:start_tiers(?TIERS, #{}),
    {tracer, {kprof_tracer, Gen}} = kprof_test_util:trace_info(new, tracer),
    K0 = Kinds(),
    Spawn(20),
    K1 = Kinds(),
    ?assertEqual(0, maps:get(spawn, K1) - maps:get(spawn, K0)),
    ?assertEqual(0, maps:get(spawned, K1) - maps:get(spawned, K0)),
    ?assert(maps:get(exit, K1) - maps:get(exit, K0) >= 20),
    ok = kprof:stop_tiers(),
    %% A generation of its own, flags with procs: spawns are written again.
    {tracer, kprof_tracer, Gen2} = Tracer = kprof_sink:tracer(),
    ?assertNotEqual(Gen, Gen2),
    Self = self(),
    P = spawn_link(fun() ->
                           receive go -> ok end,
                           Spawn(5),
                           Self ! {spawned, self()},
                           receive stop -> ok end
                   end),
    1 = erlang:trace(P, true, [procs, Tracer]),
    P ! go,
    receive {spawned, P} -> ok end,
    K2 = Kinds(),
    ?assertEqual(5, maps:get(spawn, K2) - maps:get(spawn, K1)),
    1 = erlang:trace(P, false, [procs]),
    P ! stop,
    ?assertError(badarg, kprof_tracer:discard(Gen2, [call])),
    ?assertError(badarg, kprof_tracer:discard(Gen2, [nonsense])),
    ?assertError(badarg, kprof_tracer:discard(Gen2, spawn)),
    ok = kprof_tracer:discard(0, []).

same_as_port() ->
    Run = fun(Tracer) ->
                  ok = application:set_env(kprof, tracer, Tracer),
                  ok = kprof:start_tiers(?TIERS, #{}),
                  requests(20, y),
                  ?W:run_requests(7, z, fun() -> ?W:sleep_a(1) end),
                  R = report(),
                  ok = kprof:stop_tiers(),
                  {calls(R, y), calls(R, z), maps:get(requests, maps:get(all, R))}
          end,
    Ring = Run(ring),
    ?assertEqual({{20, [{a, 20}, {b, 20}]}, {7, [{a, 7}, {b, 0}]}, 27}, Ring),
    ?assertEqual(Ring, Run(port)).

ring_full() ->
    %% 64 KiB rings and a sink slowed to 500 events/s: the ring of the one
    %% scheduler the flood is bound to fills in about a thousand events (the
    %% sink reads them all, at 2 ms each, before it answers a command).
    ok = kprof_test_util:start_fault_sink(#{}),
    ok = application:set_env(kprof, ring_bytes, 65536),
    ok = kprof:subscribe(),
    ok = kprof_sink:command({test_delay_us, 2000}),
    ok = kprof:start_tiers(?TIERS, #{}),
    P = spawn_link(fun() -> _ = erlang:process_flag(scheduler, 1), ?W:flood() end),
    Alert = receive
                {kprof_alert, overload, Info} -> kprof_test_util:alert_conforms(overload, Info)
            after 60000 -> error(no_alert)
            end,
    ?assertMatch(#{what := ring_drops, ring_size := 65536}, Alert),
    ?assert(maps:get(value, Alert) > 0),
    #{aborted := #{kind := overload, message := Msg}} = kprof:status(),
    ?assertMatch({match, _}, re:run(Msg, "ring of 64 KiB was full: [0-9]+ events lost")),
    ?assertEqual({flags, []}, kprof_test_util:trace_info(P, flags)),
    P ! stop,
    ok = kprof_sink:command({test_delay_us, 0}).

other_tracers() ->
    ok = logger:add_handler(?MODULE, ?MODULE, #{config => #{pid => self()}, level => warning}),
    try
        ok = kprof:start_tiers(?TIERS, #{}),
        requests(2, o),
        ?assertMatch({tracer, {kprof_tracer, _}}, kprof_test_util:trace_info(self(), tracer)),
        ?assertEqual([], kprof_guard:other_tracers()),
        ?assertMatch(#{other_tracers := 0}, kprof:status()),
        ?assertEqual([], tracer_warnings()),
        ok = kprof:stop_tiers(),
        %% The same through the sink's port.
        ok = application:set_env(kprof, tracer, port),
        ok = kprof:start_tiers(?TIERS, #{}),
        ?assertEqual({tracer, kprof:sink_port()}, kprof_test_util:trace_info(self(), tracer)),
        ?assertMatch(#{other_tracers := 0}, kprof:status()),
        ?assertEqual([], tracer_warnings()),
        ok = kprof:stop_tiers(),
        ok = application:unset_env(kprof, tracer),
        %% A process dbg-style traced by another process (legacy API) is
        %% named: before OTP 27 kprof cannot trace it (a warning); from OTP
        %% 27 kprof traces it too, in its own session (a notice: the costs
        %% add up).
        Dbg = spawn_link(fun() -> receive stop -> ok end end),
        Victim = spawn_link(fun() -> receive stop -> ok end end),
        1 = erlang:trace(Victim, true, [call, {tracer, Dbg}]),
        ok = kprof:start_tiers(?TIERS, #{}),
        case kprof_trace_session:supported() of
            false ->
                ?assertEqual([{Victim, Dbg}], kprof_guard:other_tracers()),
                ?assertMatch(#{other_tracers := 1}, kprof:status()),
                [Warning] = tracer_warnings(),
                ?assertMatch({match, _},
                             re:run(Warning, "^kprof: 1 process\\(es\\) already have another")),
                ?assertMatch({match, _}, re:run(Warning, "e.g. " ++ pid_to_list(Victim)
                                                ++ " is traced by " ++ pid_to_list(Dbg)));
            true ->
                ?assertEqual([], kprof_guard:other_tracers()),
                ?assertMatch(#{other_tracers := 0, other_sessions := 1}, kprof:status()),
                ?assertEqual([], tracer_warnings()),
                ?assertMatch({tracer, {kprof_tracer, _}},
                             kprof_test_util:trace_info(Victim, tracer))
        end,
        ?assertEqual({tracer, Dbg}, erlang:trace_info(Victim, tracer)),
        ok = kprof:stop_tiers(),
        [P ! stop || P <- [Victim, Dbg]]
    after
        logger:remove_handler(?MODULE)
    end.

%% The other-tracer warnings logged so far.
tracer_warnings() ->
    receive
        {log, warning, Text} ->
            case re:run(Text, "another tracer") of
                {match, _} -> [Text | tracer_warnings()];
                nomatch -> tracer_warnings()
            end
    after 100 ->
            []
    end.

-spec log(logger:log_event(), logger:handler_config()) -> ok.
log(#{level := Level, msg := Msg}, #{config := #{pid := Pid}}) ->
    Text = case Msg of
               {string, S} -> S;
               {report, R} -> io_lib:format("~0p", [R]);
               {Format, Args} -> io_lib:format(Format, Args)
           end,
    Pid ! {log, Level, unicode:characters_to_list(Text)},
    ok.

%% 25 requests of ~100 events each through the ring: past max_events => 200
%% long before the sink's first answer to the guard. The count starts before
%% the flags were set, so the burst counts.
ring_max_events() ->
    ok = kprof:subscribe(),
    Tiers = [{a, [{?W, small, 1}]}],
    ok = kprof:start_tiers(Tiers, #{max_events => 200}),
    T0 = erlang:monotonic_time(millisecond),
    Self = self(),
    P = spawn_link(fun() ->
                           ?W:run_requests(25, m, fun() -> [?W:small(I) || I <- lists:seq(1, 50)] end),
                           Self ! {done, self()},
                           receive stop -> ok end
                   end),
    receive {done, P} -> ok end,
    {Kind, Info} = receive
                       {kprof_alert, K, I} -> {K, kprof_test_util:alert_conforms(K, I)}
                   after 10000 -> error(no_alert)
                   end,
    Ms = erlang:monotonic_time(millisecond) - T0,
    ?assertEqual(limit, Kind),
    ?assertMatch(#{what := max_events, bound := 200}, Info),
    #{value := Seen} = Info,
    ?assertEqual(201, Seen),   % the sink counts every event: the 201st trips
    ?assertEqual({flags, []}, kprof_test_util:trace_info(P, flags)),
    ?assertEqual({traced, false}, kprof_test_util:trace_info({?W, small, 1}, traced)),
    #{ring_records := Recs} = kprof:sink_stats(),
    ?debugFmt("ring max_events => 200: tripped at ~b events (~b over; the ring had ~b "
              "records) ~b ms after the first request", [Seen, Seen - 200, Recs, Ms]),
    P ! stop.

%% Requests whose process is moved to another scheduler between its tier
%% calls (erlang:process_flag(scheduler, N), round the node's schedulers),
%% from 4 processes at once: each request and tier call is counted once (the
%% tiers pair every call with its return, per process, in the order the
%% sink gets them), no event of a process reaches the sink before one it
%% wrote earlier (ring_disorder), and the schedulers wrote rings of their own.
migrations() ->
    S = erlang:system_info(schedulers_online),
    Move = fun(K) -> erlang:process_flag(scheduler, K rem S + 1) end,
    Req = fun() ->
                  Move(0), ?W:sleep_a(1), Move(1), ?W:burn_a(300),
                  Move(2), ?W:burn_a(100), Move(3)
          end,
    ok = kprof:start_tiers(?TIERS, #{}),
    Self = self(),
    Ps = [spawn_link(fun() ->
                             ?W:run_requests(50, moved, Req),
                             _ = erlang:process_flag(scheduler, 0),
                             Self ! {done, self()}
                     end) || _ <- lists:seq(1, 4)],
    [receive {done, P} -> ok end || P <- Ps],
    ?assertEqual({200, [{a, 200}, {b, 400}]}, calls(report(), moved)),
    #{ring_disorder := 0, ring_drops := 0, ring_unresolved := 0, ring_bad := 0,
      ring_claimed := Claimed, ring_rings := Rings} = kprof:sink_stats(),
    ?assert(Claimed >= min(2, S)),
    ?assertEqual(element(2, kprof_tracer:rings(default)), Rings),
    ?assertMatch(#{rings := Rings, claimed := Claimed}, kprof_tracer:ring_info()).

%% Two rings only: the first scheduler thread to trace claims the first, every
%% other writes the shared last ring under the NIF's lock. 4 processes on the
%% node's schedulers in turn, 2,000 calls each: every call reaches the sink once,
%% each process's in order, none dropped; one ring claimed.
shared_ring() ->
    _ = application:load(kprof),
    _ = kprof:stop(),
    {module, ?W} = code:ensure_loaded(?W),
    S = erlang:system_info(schedulers_online),
    Port = open_port({spawn_executable, kprof_sink:default_path()},
                     [binary, {packet, 4}, use_stdio, exit_status]),
    Cmd = fun(C) ->
                  Ref = make_ref(),
                  true = port_command(Port, term_to_binary({kprof, Ref, C})),
                  receive {Port, {data, B}} -> {kprof_reply, Ref, R} = binary_to_term(B), R
                  after 10000 -> error({no_reply, C})
                  end
          end,
    {ok, Name} = Cmd({ring_open, 1 bsl 20, 2}),
    Gen = erlang:unique_integer([positive]),
    ok = kprof_tracer:attach(Name, Gen),
    ok = Cmd(ring_unlink),
    Self = self(),
    Ps = [spawn_link(fun() ->
                             receive go -> ok end,
                             [begin
                                  _ = I rem 100 =:= 0 andalso
                                      erlang:process_flag(scheduler, (K + I div 100) rem S + 1),
                                  ?W:small(I)
                              end || I <- lists:seq(1, 2000)],
                             _ = erlang:process_flag(scheduler, 0),
                             Self ! {done, self()}
                     end) || K <- lists:seq(1, 4)],
    1 = erlang:trace_pattern({?W, small, 1}, true, [local]),
    [1 = erlang:trace(P, true, [call, {tracer, kprof_tracer, Gen}]) || P <- Ps],
    [P ! go || P <- Ps],
    [receive {done, P} -> ok end || P <- Ps],
    erlang:trace_pattern({?W, small, 1}, false, [local]),
    #{trace_events := 8000, ring_drops := 0, ring_disorder := 0, ring_bad := 0,
      ring_unresolved := 0, ring_rings := 2, ring_claimed := 1,
      events := #{call := 8000}, ring_wait_ms := Wait, ring_wait_max_ms := 16} = Cmd(stats),
    %% Paced drains (port/ring/ring_pace.c): 1 MiB rings are drained at least
    %% every 4 ms (half a ring at the writers' peak rate).
    ?assert(Wait >= 1 andalso Wait =< 4),
    ?assertMatch(#{rings := 2, claimed := 1, drops := 0}, kprof_tracer:ring_info()),
    ok = kprof_tracer:release(),
    port_close(Port).

fallback() ->
    ok = application:set_env(kprof, ring_bytes, 1000),   % not a power of two: refused
    ok = kprof:start_tiers(?TIERS, #{}),
    requests(3, w),
    ?assertMatch({tracer, Port} when is_port(Port), kprof_test_util:trace_info(self(), tracer)),
    ?assertEqual({3, [{a, 3}, {b, 3}]}, calls(report(), w)).

%% The largest rings there are (KS_RING_MAX_SIZE, 4 GiB each): the sink halves
%% them until the object takes at most half of /dev/shm's free room
%% (port/ring/ring.c, ks_ring_fit), which a writer's page fault past the
%% room would otherwise have killed the VM for; kprof_sink says so.
smaller_rings() ->
    Asked = 1 bsl 32,
    Room0 = shm_room(),
    ok = application:set_env(kprof, ring_bytes, Asked),
    ok = logger:add_handler(?MODULE, ?MODULE, #{level => notice, config => #{pid => self()}}),
    try
        ok = kprof:start_tiers(?TIERS, #{}),
        Room1 = shm_room(),   % other tests' rings may come and go in between
        requests(3, r),
        ?assertMatch({tracer, {kprof_tracer, _}}, kprof_test_util:trace_info(self(), tracer)),
        ?assertEqual({3, [{a, 3}, {b, 3}]}, calls(report(), r)),
        #{size := Size, rings := Rings} = kprof_tracer:ring_info(),
        %% Half the room at most, and the largest power of two that is.
        ?assert(2 * object_bytes(Size, Rings) =< max(Room0, Room1)),
        Notices = [T || {log, notice, T} <- flush_logs(), string:find(T, "rings are") =/= nomatch],
        case Size < Asked of
            true ->
                ?assert(2 * object_bytes(2 * Size, Rings) > min(Room0, Room1)),
                Said = lists:flatten(io_lib:format("kprof: the tracer's ~b rings are ~ts "
                                                   "each, not 4096 MiB: /dev/shm has room for "
                                                   "no more", [Rings, kprof_alert:bytes(Size)])),
                ?assertMatch([_], Notices),
                ?assertNotEqual(nomatch, string:prefix(hd(Notices), Said));
            false ->
                ?assertEqual([], Notices)
        end
    after
        logger:remove_handler(?MODULE)
    end.

%% include/ks_ring.h: ks_ring_object_bytes/2, KS_RING_HDR 4096.
object_bytes(Size, Rings) ->
    4096 + Rings * (4096 + Size).

%% /dev/shm's free bytes, as df reads them (statvfs: f_bavail * f_frsize).
shm_room() ->
    [_, Avail | _] = string:lexemes(os:cmd("df -B1 --output=avail /dev/shm"), "\n "),
    list_to_integer(Avail).

flush_logs() ->
    receive {log, _, _} = L -> [L | flush_logs()] after 0 -> [] end.

stale() ->
    ?assertEqual(remove, kprof_tracer:enabled(call, 123456789, self())),
    ok = kprof:start_tiers(?TIERS, #{}),
    requests(1, s),
    {tracer, {kprof_tracer, Gen}} = kprof_test_util:trace_info(self(), tracer),
    ?assertEqual(trace, kprof_tracer:enabled(call, Gen, self())),
    ?assertEqual(remove, kprof_tracer:enabled(call, Gen + 1, self())),
    ok = kprof:stop_tiers(),
    ?assertEqual(remove, kprof_tracer:enabled(call, Gen, self())),
    %% A new session has a new generation.
    ok = kprof:start_tiers(?TIERS, #{}),
    requests(1, s),
    {tracer, {kprof_tracer, Gen2}} = kprof_test_util:trace_info(self(), tracer),
    ?assertNotEqual(Gen, Gen2),
    ?assertEqual(remove, kprof_tracer:enabled(call, Gen, self())).
