%%% @doc kprof's one alert shape (kprof_alert): every kind the real sink
%%% sends, those of the guard that do not come from its ticks, the
%%% constructor, and the documented list of kinds. The alerts of the
%%% guard's ticks are checked in kprof_guard_watch_tests; kprof_guard_tests
%%% checks every alert it receives too (kprof_test_util:alert_conforms/2).
-module(kprof_alert_tests).

-include_lib("eunit/include/eunit.hrl").

-export([work/1]).

-define(WAIT, 10000).

%% Traced by the tests.
-spec work(term()) -> term().
work(X) -> X.

-spec alert_test_() -> term().
alert_test_() ->
    [{"new/5 and from_map/2: the one shape, a message", fun constructor/0},
     {"kinds/0 is what the module doc lists", fun documented/0},
     {"a memory alert names the VM's other memory (ports' queues among it)", fun memory_other/0},
     {foreach, fun setup/0, fun cleanup/1,
      [{"the sink's max_events alert", fun sink_max_events/0},
       {"the sink's rate alert", fun sink_rate/0},
       {"the sink's lag alert", fun sink_lag/0},
       {"the sink killed: sink_down", fun sink_killed/0},
       {"the guard: a mode's owner killed: owner_down", fun guard_owner/0},
       {"the guard: kprof_sink killed: sink_down", fun guard_sink_server/0}]}].

%% Started here; each test subscribes itself (eunit runs a foreach's setup
%% in another process than its test).
setup() ->
    ok = kprof_test_util:start(#{tracer => port}).

cleanup(_) ->
    _ = erlang:trace(all, false, [all]),
    _ = erlang:trace_pattern({?MODULE, work, 1}, false, [local]),
    ok = kprof:stop().

memory_other() ->
    MiB = fun(N) -> N bsl 20 end,
    Parts = #{total => MiB(300), processes => MiB(50), system => MiB(250), binary => MiB(20),
              ets => MiB(10), code => MiB(15), atom => MiB(5)},
    #{message := Msg} = kprof_alert:new(overload, memory_bytes, MiB(300), MiB(100),
                                        #{memory => Parts, largest => []}),
    ?assertEqual(<<"overload (node memory 300 MiB > 100 MiB: processes 50 MiB, binary 20 MiB, "
                   "ets 10 MiB, code 15 MiB, other 200 MiB)">>, Msg).

constructor() ->
    A = kprof_alert:new(overload, queue_bytes, 5000000, 4194304, #{extra => 1}),
    kprof_test_util:alert_conforms(overload, A),
    ?assertMatch(#{what := queue_bytes, value := 5000000, bound := 4194304, extra := 1,
                   message := <<"overload (queue_bytes 5000000 > 4194304)">>}, A),
    %% A map with the three keys keeps them; the others are kept as detail.
    B = kprof_alert:from_map(limit, #{what => max_events, value => 11, bound => 10,
                                      events => 14}),
    ?assertMatch(#{what := max_events, value := 11, bound := 10, events := 14,
                   message := <<"limit (max_events 11 > 10)">>},
                 kprof_test_util:alert_conforms(limit, B)),
    %% A hand-made abort's info: its kind is what it measured.
    C = kprof_alert:from_map(manual, #{why => test}),
    ?assertMatch(#{what := manual, value := undefined, bound := undefined, why := test},
                 kprof_test_util:alert_conforms(manual, C)),
    ?assertMatch(#{what := test, detail := not_a_map},
                 kprof_test_util:alert_conforms(test, kprof_alert:from_map(test, not_a_map))),
    %% The message is the constructor's, whatever the map said.
    ?assertMatch(#{message := <<"sink_down (the sink exited: 137)">>},
                 kprof_alert:new(sink_down, sink_status, 137, undefined,
                                 #{message => <<"stale">>})).

%% Each kind and each `what' of kinds/0 is named in kprof_alert's module doc.
documented() ->
    {ok, Text} = file:read_file(proplists:get_value(source, kprof_alert:module_info(compile))),
    Doc = iolist_to_binary([L || L <- binary:split(Text, <<"\n">>, [global]),
                                 binary:match(L, <<"%%%">>) =:= {0, 3}]),
    Named = [Atom || {K, Ws} <- maps:to_list(kprof_alert:kinds()), Atom <- [K | Ws]],
    ?assertEqual([], [A || A <- Named,
                           binary:match(Doc, <<"`", (atom_to_binary(A))/binary, "'">>)
                               =:= nomatch]).

%% The sink counts the events after {limits, 5, 0, 0}: the sixth trips.
sink_max_events() ->
    ok = kprof_sink:subscribe(),
    {ok, _} = kprof_sink:command({limits, 5, 0, 0}),
    trace_calls(10, []),
    Info = next_alert(limit),
    ?assertMatch(#{what := max_events, value := 6, bound := 5, events := _}, Info).

sink_rate() ->
    ok = kprof_sink:subscribe(),
    {ok, _} = kprof_sink:command({limits, 0, 3, 60000}),
    trace_calls(10, []),
    Info = next_alert(limit),
    ?assertMatch(#{what := rate, value := 4, bound := 3, per_ms := 60000}, Info).

%% The VM's clock said to be 5 s ahead of the events' timestamps: the first
%% event read is 5 s late.
sink_lag() ->
    ok = kprof_sink:subscribe(),
    ok = kprof_sink:command({clock, erlang:monotonic_time(nanosecond) + 5000000000}),
    ok = kprof_sink:command({overload, 100}),
    trace_calls(1, [monotonic_timestamp]),
    Info = next_alert(overload),
    ?assertMatch(#{what := lag_ms, bound := 100, max_lag_us := 100000}, Info),
    ?assert(maps:get(value, Info) >= 4900),
    ?assertEqual(maps:get(value, Info), maps:get(lag_us, Info) div 1000),
    ok = kprof_sink:command({overload, 0}).

sink_killed() ->
    ok = kprof_sink:subscribe(),
    {os_pid, OsPid} = erlang:port_info(kprof:sink_port(), os_pid),
    _ = os:cmd("kill -9 " ++ integer_to_list(OsPid)),
    Info = next_alert(sink_down),
    ?assertMatch(#{what := sink_status, value := 137, status := 137}, Info).

guard_owner() ->
    ok = kprof:subscribe(),
    Owner = spawn(fun() -> receive stop -> ok end end),
    ok = kprof_guard:arm(alert_test, #{abort => fun(_, _) -> ok end, owner => Owner}),
    exit(Owner, kill),
    Info = next_alert(owner_down),
    ?assertMatch(#{what := owner, value := killed, owner := Owner, modes := [alert_test]},
                 Info).

guard_sink_server() ->
    ok = kprof:subscribe(),
    ok = kprof_guard:arm(alert_test, #{abort => fun(_, _) -> ok end}),
    exit(whereis(kprof_sink), kill),
    ?assertMatch(#{what := sink_server}, next_alert(sink_down)).

%% N calls of work/1 traced to the sink's port; a sync so that the sink has
%% read them.
trace_calls(N, Flags) ->
    Port = kprof:sink_port(),
    Self = self(),
    P = spawn(fun() -> receive go -> ok end, [?MODULE:work(I) || I <- lists:seq(1, N)],
                       Self ! done end),
    1 = erlang:trace(P, true, [call, {tracer, Port} | Flags]),
    1 = erlang:trace_pattern({?MODULE, work, 1}, true, [local]),
    P ! go,
    receive done -> ok after ?WAIT -> error(no_calls) end,
    {synced, _} = kprof_sink:command(sync).

next_alert(Kind) ->
    receive
        {kprof_alert, Kind, Info} -> kprof_test_util:alert_conforms(Kind, Info)
    after ?WAIT ->
        error({no_alert, Kind})
    end.
