%%% EUnit: kprof in trace sessions of its own (kprof_trace_session).
%%%
%%% On OTP 27 and later kprof runs beside other tracers on the same processes
%%% and functions, each getting its events and none stopping the other: dbg
%%% (its own session), a recon_trace-style tracer of the legacy API
%%% (`erlang:trace(all, true, [call, {tracer, Pid}])' with a pattern), and
%%% tprof (its own session, `call_count' and `call_time'). Before OTP 27 a
%%% process has one tracer: kprof refuses a process another tracer has, and
%%% leaves that tracer as it was.
%%%
%%% On every OTP: after every way a run of each mode can end (its own end, an
%%% abort by each of the guard's limits that a test can trip here, a manual
%%% abort, kprof:cancel(), the sink killed, the owner killed, kprof stopped)
%%% no session of kprof's is left (`trace:session_info(all)') and no trace
%%% flag or pattern of kprof's is left in the legacy API's session.
%%%
%%% Garbage collection traced by two sessions on one process crashes OTP 27
%%% to 29 (erlang/otp issue 11624): kprof refuses `gc => true' then.
-module(kprof_trace_session_tests).

-include_lib("eunit/include/eunit.hrl").

%% Traced by the tests.
-export([work/1, loop/0, busy_loop/0, trig/0, trig_loop/0, spin/1]).
%% The logger handler of delivered_test/0.
-export([log/2]).

-import(kprof_test_util, [wait_until/2]).

-define(WORK, {?MODULE, work, 1}).
-define(TIERS, [{w, [?WORK]}]).

%%%%%%%%%%%%%%%%%%%
%%% TRACED CODE %%%
%%%%%%%%%%%%%%%%%%%

work(N) ->
    lists:reverse(lists:seq(1, N)).

%% work/1 in a loop, a millisecond's pause now and then, until told to stop.
loop() ->
    _ = ?MODULE:work(20),
    receive stop -> ok after 1 -> loop() end.

%% work/1 in a loop that never waits on a timer, until told to stop. On
%% OTP 29.1 a process traced by dbg (a process tracer with a handler fun,
%% in dbg's session) sometimes never wakes from a `receive ... after 1'
%% (seen without kprof: dbg:tracer(process, {Fun, Acc}), dbg:p(W, call),
%% dbg:tpl on a function W calls; not on OTP 25 or 27); dbg's tests here
%% trace this loop instead.
busy_loop() ->
    _ = ?MODULE:work(20),
    erlang:yield(),
    receive stop -> ok after 0 -> busy_loop() end.

trig() ->
    ?MODULE:spin(5).

trig_loop() ->
    _ = ?MODULE:trig(),
    receive stop -> ok after 1 -> trig_loop() end.

%% work/1 for Ms milliseconds.
spin(Ms) ->
    End = erlang:monotonic_time(millisecond) + Ms,
    spin_until(End).

spin_until(End) ->
    _ = ?MODULE:work(20),
    case erlang:monotonic_time(millisecond) >= End of
        true -> ok;
        false -> spin_until(End)
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% BESIDE OTHER TRACERS (OTP 27+)   %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% delivered/2: `ok' once every scheduler has handed over its trace
%% messages; `timeout', and a warning that says so, when the VM has not
%% answered in time. With no time at all it cannot have: this process's own
%% scheduler answers only once the process is scheduled out.
delivered_test() ->
    T0 = erlang:monotonic_time(millisecond),
    ?assertEqual(ok, kprof_trace_session:delivered("test", 5000)),
    Took = erlang:monotonic_time(millisecond) - T0,
    Self = self(),
    ok = logger:add_handler(?MODULE, ?MODULE, #{level => warning, config => #{pid => Self}}),
    try
        ?assertEqual(timeout, kprof_trace_session:delivered("test", 0)),
        receive
            {log, Msg} ->
                ?assertMatch({match, _}, re:run(Msg, "^kprof test: the VM had not handed over "
                                                     "every trace message after 0 ms"))
        after 5000 ->
            ?assert(false)
        end
    after
        logger:remove_handler(?MODULE)
    end,
    %% The VM's late answer went to the waiter, not here: once an answer of
    %% our own has come (every scheduler has run the request made after the
    %% timed-out one), and then as long again as the first wait took, nothing
    %% else is in this mailbox.
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after 5000 -> ?assert(false) end,
    receive
        {trace_delivered, all, _} = Late -> ?assertEqual(none, Late)
    after 10 * Took + 10 -> ok
    end,
    ?assertEqual({messages, []}, process_info(self(), messages)).

%% @private The logger handler of delivered_test/0.
log(#{msg := {F, A}}, #{config := #{pid := Pid}}) when is_list(F) ->
    Pid ! {log, lists:flatten(io_lib:format(F, A))},
    ok;
log(_, _) ->
    ok.

%% Before OTP 27: the refusals (dbg is a tracer of the legacy API there, as
%% recon_trace is, and tprof is not there).
beside_test_() ->
    Tests = case sessions() of
                true ->
                    [{"dbg (its own session) and flame_pid on the same process and function",
                      fun dbg_beside/1},
                     {"dbg stopped in the middle of a capture: kprof's tracing goes on",
                      fun dbg_stops_first/1},
                     {"a recon_trace-style tracer (legacy API) and flame_pid, flame_capture",
                      fun legacy_beside_flame/1},
                     {"a recon_trace-style tracer (legacy API) and the tiers",
                      fun legacy_beside_tiers/1},
                     {"tprof's call_count and call_time and kprof:calls count the same calls",
                      fun tprof_beside_calls/1},
                     {"tprof and flame_apply on the same function",
                      fun tprof_beside_flame/1},
                     {"gc => true while another session traces a process's gc: refused",
                      fun gc_refused/1}];
                false ->
                    [{"a process the legacy API's tracer has: refused, that tracer intact",
                      fun legacy_beside_flame/1},
                     {"gc => true on a process another tracer has: refused",
                      fun gc_refused/1}]
            end,
    {foreach, fun setup/0, fun cleanup/1,
     [fun(D) -> {Title, {timeout, 120, fun() -> F(D) end}} end || {Title, F} <- Tests]}.

%% dbg traces work/1 in every process; kprof captures one of them. Each gets
%% the calls of that process; dbg still gets them after kprof's end.
dbg_beside(Dir) ->
    W = spawn_link(fun ?MODULE:busy_loop/0),
    C = dbg_tracer(),
    try
        {ok, _} = dbg:p(all, call),
        {ok, _} = dbg:tpl(?MODULE, work, 1, []),
        ok = wait_until(fun() -> count(C) > 0 end, 10000),
        {ok, [File]} = kprof:flame_pid(W, 300, opts(Dir)),
        ?assert(count(C) > 0),   % during the capture
        has_work(File),
        ?assertEqual([], left()),
        ok = wait_until(fun() -> count(C) > 0 end, 10000)   % and after
    after
        dbg:stop(),
        stop(W)
    end.

dbg_stops_first(Dir) ->
    W = spawn_link(fun ?MODULE:busy_loop/0),
    C = dbg_tracer(),
    {ok, _} = dbg:p(all, call),
    {ok, _} = dbg:tpl(?MODULE, work, 1, []),
    ok = wait_until(fun() -> count(C) > 0 end, 10000),
    Runner = run(fun() -> kprof:flame_pid(W, 1500, opts(Dir)) end),
    ok = wait_until(fun() -> kprof_flags(W) =/= [] end, 10000),
    dbg:stop(),
    %% kprof's flags and session are still there once dbg is gone.
    ?assertMatch([_ | _], kprof_flags(W)),
    ?assertMatch([{kprof_flame, _}], kprof_test_util:kprof_sessions()),
    {ok, [File]} = result(Runner),
    has_work(File),
    stop(W),
    ?assertEqual([], left()).

%% A tracer of the legacy API, as recon_trace sets one up: call flags on
%% every process, a local pattern on work/1. kprof captures the same process
%% (flame_pid) and the same function (flame_capture's trigger calls it).
legacy_beside_flame(Dir) ->
    W = spawn_link(fun ?MODULE:loop/0),
    T = legacy_tracer(),
    try
        ok = wait_until(fun() -> count(T) > 0 end, 10000),
        case sessions() of
            true ->
                {ok, [File]} = kprof:flame_pid(W, 300, opts(Dir)),
                ?assert(count(T) > 0),   % during the capture
                has_work(File),
                T2 = spawn_link(fun ?MODULE:trig_loop/0),
                {ok, [File2]} = kprof:flame_capture({?MODULE, trig, 0}, 3,
                                                    (opts(Dir))#{timeout => 30000}),
                has_work(File2),
                stop(T2),
                legacy_intact(W, T),
                ?assertEqual([], kprof_left());
            false ->
                ?assertMatch({error, {traced_by_other, W, T}},
                             kprof:flame_pid(W, 300, opts(Dir))),
                legacy_intact(W, T)
        end
    after
        legacy_off(),
        stop(W)
    end.

legacy_beside_tiers(_Dir) ->
    T = legacy_tracer(),
    try
        ok = kprof:start_tiers(?TIERS, #{}),
        Me = self(),
        _ = count(T),
        [kprof:request(I, fun() -> ?MODULE:work(20) end) || I <- lists:seq(1, 20)],
        ?assertEqual(20, delivered_count(T)),
        {ok, #{rows := Rows}} = kprof:report(#{format => term}),
        ?assertMatch([_ | _], Rows),
        ok = kprof:stop_tiers(),
        legacy_intact(Me, T),
        ?assertEqual([], kprof_left())
    after
        legacy_off()
    end.

%% Both count work/1 in this process, 1,000 calls, in sessions of their own:
%% tprof's counters (call_count, then call_time) and kprof's records (with
%% its own call_time) are each exact.
tprof_beside_calls(_Dir) ->
    [begin
         Runner = run(fun() -> kprof_calls:run(?WORK, #{ms => 60000, max => 1000, time => true,
                                                        print => false})
                      end),
         ok = wait_until(fun() -> kprof_flags(new) =/= [] end, 10000),
         {ok, {Type, [{?MODULE, work, 1, [{_, 1000, _}]}]}} =
             tprof:profile(fun() -> [?MODULE:work(1) || _ <- lists:seq(1, 1000)], ok end,
                           #{type => Type, pattern => ?WORK, report => return}),
         {ok, [#{mfa := ?WORK, calls := 1000, time_calls := 1000}], #{stopped := max}} =
             result(Runner)
     end || Type <- [call_count, call_time]],
    ?assertEqual([], left()).

%% tprof counts work/1 in a process of its own while kprof's flame_apply
%% traces the same function in this one.
tprof_beside_flame(Dir) ->
    Self = self(),
    Tprof = spawn_link(fun() ->
                               receive go -> ok end,
                               R = tprof:profile(fun() -> ?MODULE:spin(300) end,
                                                 #{type => call_count, pattern => ?WORK,
                                                   report => return}),
                               Self ! {tprof, R}
                       end),
    {ok, ok, [File]} = kprof:flame_apply(fun() -> Tprof ! go, ?MODULE:spin(300) end, opts(Dir)),
    has_work(File),
    {ok, {call_count, [{?MODULE, work, 1, [{_, N, _}]}]}} =
        receive {tprof, R} -> R after 30000 -> error(no_tprof) end,
    ?assert(N > 0),
    ?assertEqual([], left()).

%% Another session traces W's garbage collection (the legacy API's, then
%% dbg's): gc => true is refused with the reason, gc => false runs beside it,
%% and the node lives on through collections of W.
gc_refused(Dir) ->
    W = spawn_link(fun ?MODULE:loop/0),
    T = spawn_link(fun() -> sink_loop() end),
    try
        1 = erlang:trace(W, true, [garbage_collection, {tracer, T}]),
        case sessions() of
            true ->
                ?assertEqual({error, {gc_traced_by_other_session, W, T}},
                             kprof:flame_pid(W, 200, (opts(Dir))#{gc => true})),
                ?assertMatch({error, {gc_traced_by_other_session, _, _}},
                             kprof:flame_capture({?MODULE, trig, 0}, 1,
                                                 (opts(Dir))#{gc => true, timeout => 1000})),
                {ok, [_]} = kprof:flame_pid(W, 200, (opts(Dir))#{gc => false}),
                1 = erlang:trace(W, false, [garbage_collection]),
                {ok, _} = dbg:tracer(process, {fun(_, N) -> N end, 0}),
                {ok, _} = dbg:p(W, [garbage_collection]),
                ?assertMatch({error, {gc_traced_by_other_session, W, _}},
                             kprof:flame_pid(W, 200, (opts(Dir))#{gc => true})),
                dbg:stop();
            false ->
                ?assertMatch({error, {traced_by_other, W, T}},
                             kprof:flame_pid(W, 200, (opts(Dir))#{gc => true}))
        end,
        [true = erlang:garbage_collect(W) || _ <- lists:seq(1, 20)],
        ?assert(is_process_alive(W)),
        ?assertEqual([], left())
    after
        _ = erlang:trace(W, false, [all]),
        stop(W),
        unlink(T),
        exit(T, kill)
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% EVERY END LEAVES NOTHING (every OTP)        %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% Each mode ended each way; after each, nothing of kprof's is left. (The
%% limits that need a sink too slow to keep up, max_lag_ms and
%% max_queue_bytes, are kprof_guard_tests'; kprof_fault_tests ends each mode
%% with the sink frozen or killed and kprof's servers killed, and checks
%% the same.)
endings_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [fun(D) -> {lists:flatten(io_lib:format("~p ended by ~p", [Mode, End])),
                 {timeout, 120, fun() -> ended(Mode, End, D) end}}
      end
      || {Mode, End} <- [{M, E} || M <- [flame_pid, flame_capture, flame_apply, tiers, calls],
                                   E <- [done, max_events, rate, max_seconds, max_memory_bytes,
                                         manual, sink_killed, owner_killed, kprof_stopped]]
             ++ [{flame_pid, cancel}, {flame_capture, cancel}, {flame_pid, max_stall_ms},
                 {tiers, max_stall_ms}, {calls, max_stall_ms}]]}.

%% The workers stop whatever happens: left running, the tiers' would make
%% requests in every later test.
ended(Mode, End, Dir) ->
    Workers = workers(Mode),
    try
        ended(Mode, End, Dir, Workers)
    after
        [stop(W) || W <- Workers]
    end.

ended(Mode, End, Dir, Workers) ->
    Runner = run(fun() -> start(Mode, End, limits(End), Dir, Workers) end),
    %% Tracing set, or the run over already, or a limit tripped: it may end
    %% the tracing before any poll sees it set, and flame_apply's run then
    %% goes on for 30 s (the polls only outlasted it while each was slow).
    %% The tiers' start returns at once, armed: a manual abort before that
    %% (their session set, the guard not armed yet) found nothing to abort
    %% (seen on OTP 29 in a make test), so their runs wait for it. The sink
    %% frozen (max_stall_ms) must find the workers traced: frozen between
    %% the session and its first event, the run's call to the sink times
    %% out and it returns an error: no event in the ring for the guard to
    %% see stall, no abort, the NIF left live past finish/3's 20 s (seen on
    %% OTP 27 in a loaded make test: calls). A run that did neither says
    %% where it waits.
    ok = wait_or_say(fun() -> (Mode =/= tiers andalso kprof_set() andalso traced(End, Workers))
                                  orelse has_result(Runner) orelse limit_tripped(End) end,
                     fun() -> {not_started, Mode, End,
                               [{P, stack(P)} || P <- [Runner, whereis(kprof_tiers),
                                                       whereis(kprof_guard), whereis(kprof_sink)]]}
                     end),
    finish(End, Mode, Runner),
    Result = case {Mode, End} of
                 {tiers, _} -> result(Runner);
                 {_, owner_killed} -> killed;
                 _ -> result(Runner)
             end,
    %% The tiers end by themselves, but for their own end (a stop). Still
    %% on: what the guard, the tiers and the sink say.
    _ = Mode =:= tiers andalso End =/= done andalso End =/= kprof_stopped
        andalso wait_or_say(fun tiers_off/0,
                            fun() -> {tiers_still_on, End, kprof:status(), kprof_tiers:info(),
                                      kprof_test_util:caught(fun kprof_sink:info/0),
                                      kprof_test_util:caught(fun kprof:sink_stats/0)}
                            end),
    [stop(W) || W <- Workers],
    ok = wait_until(fun() -> left() =:= [] end, 20000),
    ?debugFmt("~p ended by ~p: ~P; nothing left", [Mode, End, Result, 8]).

%% Whether the run traces its workers, where the end needs them traced.
traced(max_stall_ms, Workers) ->
    lists:any(fun kprof_test_util:kprof_traced/1, Workers);
traced(_End, _Workers) ->
    true.

%% What each end needs of the run's options.
limits(max_events) -> #{max_events => 50};
limits(rate) -> #{rate => {10, 1000}};
limits(max_seconds) -> #{max_seconds => 1};
limits(max_memory_bytes) -> #{max_memory_bytes => 1};
limits(_) -> #{}.

workers(flame_capture) -> [spawn(fun ?MODULE:trig_loop/0)];
workers(tiers) -> [spawn(fun requests/0)];
workers(flame_apply) -> [];
workers(_) -> [spawn(fun ?MODULE:loop/0)].

%% The run, in the runner: its own end is short; the others come first.
start(flame_pid, End, Limits, Dir, [W]) ->
    kprof:flame_pid(W, ms(End), maps:merge(opts(Dir), Limits));
start(flame_capture, End, Limits, Dir, _) ->
    N = case End of done -> 3; _ -> 1000000 end,
    kprof:flame_capture({?MODULE, trig, 0}, N,
                        maps:merge((opts(Dir))#{timeout => 60000}, Limits));
start(flame_apply, End, Limits, Dir, _) ->
    kprof:flame_apply(fun() -> ?MODULE:spin(ms(End)) end, maps:merge(opts(Dir), Limits));
start(tiers, _End, Limits, _Dir, _) ->
    kprof:start_tiers(?TIERS, Limits);
start(calls, End, Limits, _Dir, _) ->
    kprof:calls(?WORK, maps:merge(#{ms => ms(End), max => infinity, print => false}, Limits)).

ms(done) -> 400;
ms(_) -> 30000.

%% Tier requests, a millisecond apart, until told to stop.
requests() ->
    _ = kprof:request(x, fun() -> ?MODULE:work(20) end),
    receive stop -> ok after 1 -> requests() end.

%% The end, from the outside (a limit needs nothing: it trips by itself).
finish(done, tiers, _Runner) ->
    timer:sleep(ms(done)),
    ok = kprof:stop_tiers();
finish(manual, _Mode, _Runner) ->
    ok = kprof_guard:abort(manual, #{});
finish(cancel, _Mode, _Runner) ->
    {ok, _} = kprof:cancel(),
    ok;
finish(sink_killed, _Mode, _Runner) ->
    #{os_pid := OsPid} = kprof_sink:info(),
    _ = os:cmd("kill -9 " ++ integer_to_list(OsPid)),
    ok;
finish(owner_killed, tiers, _Runner) ->
    exit(whereis(kprof_tiers), kill);
finish(owner_killed, _Mode, Runner) ->
    exit(Runner, kill);
finish(kprof_stopped, _Mode, _Runner) ->
    ok = kprof:stop();
finish(max_stall_ms, _Mode, _Runner) ->
    %% Frozen until the guard has aborted (it detaches the NIF first).
    #{os_pid := OsPid} = kprof_sink:info(),
    _ = os:cmd("kill -STOP " ++ integer_to_list(OsPid)),
    ok = wait_until(fun() -> kprof_tracer:live() =:= 0 end, 20000),
    _ = os:cmd("kill -CONT " ++ integer_to_list(OsPid)),
    ok;
finish(_End, _Mode, _Runner) ->
    ok.

%% Something of kprof's is set: its session (OTP 27+), or in the legacy
%% API's a process whose tracer is kprof's.
kprof_set() ->
    kprof_test_util:kprof_sessions() =/= []
        orelse lists:any(fun({flags, _, _}) -> true; (_) -> false end, left()).

%% (max_memory_bytes => 1 trips at the guard's first tick, an overload: on
%% OTP 25 a flame_apply's flags could be gone before any poll saw them.)
limit_tripped(End) when End =:= max_events; End =:= rate; End =:= max_seconds;
                        End =:= max_memory_bytes ->
    case kprof:status() of
        #{aborted := #{kind := Kind}} -> Kind =:= limit orelse Kind =:= overload;
        _ -> false
    end;
limit_tripped(_) ->
    false.

tiers_off() ->
    case kprof_tiers:info() of
        #{active := Active} -> not Active;
        _ -> true
    end.

%% kprof_test_util:wait_or_say/3 for 20 s.
wait_or_say(F, Say) ->
    kprof_test_util:wait_or_say(F, 20000, Say).

stack(undefined) ->
    undefined;
stack(P) ->
    erlang:process_info(P, current_stacktrace).

has_result(Runner) ->
    {messages, Ms} = erlang:process_info(self(), messages),
    lists:any(fun({result, R, _}) -> R =:= Runner; (_) -> false end, Ms).

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

setup() ->
    kprof_test_util:start_quiet("kprof-sessions").

cleanup(Dir) ->
    _ = kprof_test_util:caught(fun() -> dbg:stop() end),
    legacy_off(),
    _ = case kprof_test_util:caught(fun() -> kprof_sink:info() end) of
            #{os_pid := P} -> os:cmd("kill -CONT " ++ integer_to_list(P));
            _ -> ok
        end,
    flush(),
    kprof_test_util:stop_quiet(Dir).

%% (No calibration of tracing's cost: these tests read which frames a
%% capture has, not their times.)
opts(Dir) ->
    #{output_directory => Dir, output_format => folded, progress => false, correct => false}.

%% Whether this OTP has trace sessions (kprof traces in its own then).
sessions() ->
    kprof_trace_session:supported().

%% Fun in a process of its own; its result comes as {result, Pid, R}.
run(Fun) ->
    Self = self(),
    spawn(fun() -> Self ! {result, self(), Fun()} end).

result(Runner) ->
    receive {result, Runner, R} -> R after 90000 -> error({no_result, Runner}) end.

stop(P) ->
    unlink(P),
    P ! stop,
    ok.

flush() ->
    receive _ -> flush() after 0 -> ok end.

%% The flags kprof set on Who, in its own session (OTP 27+) or the legacy API's.
kprof_flags(Who) ->
    case kprof_test_util:trace_info(Who, flags) of
        {flags, Fs} -> Fs;
        _ -> []
    end.

%% A tracer of the legacy API, as recon_trace's: every process's calls of
%% work/1 come to it, and it counts them (count/1).
legacy_tracer() ->
    T = spawn_link(fun() -> counter(0) end),
    _ = erlang:trace(all, true, [call, {tracer, T}]),
    1 = erlang:trace_pattern(?WORK, true, [local]),
    T.

legacy_off() ->
    _ = erlang:trace(all, false, [call]),
    _ = erlang:trace_pattern(?WORK, false, [local]),
    ok.

%% The legacy tracer still has W and the pattern, and W's calls come to it.
legacy_intact(W, T) ->
    ?assertEqual({tracer, T}, erlang:trace_info(W, tracer)),
    ?assertMatch({flags, [call]}, erlang:trace_info(W, flags)),
    ?assertEqual({traced, local}, erlang:trace_info(?WORK, traced)),
    flush(),
    case W =:= self() of
        true -> _ = count(T), _ = ?MODULE:work(1), ?assertEqual(1, delivered_count(T));
        false -> _ = count(T), ok = wait_until(fun() -> count(T) > 0 end, 10000)
    end.

sink_loop() ->
    receive _ -> sink_loop() end.

%% dbg's tracer, its handler counting the calls of work/1 it is given.
dbg_tracer() ->
    C = spawn_link(fun() -> counter(0) end),
    {ok, _} = dbg:tracer(process, {fun(Msg, N) -> C ! Msg, N end, 0}),
    C.

counter(N) ->
    receive
        {trace, _, call, {?MODULE, work, _}} -> counter(N + 1);
        {count, P} -> P ! {count, self(), N}, counter(0);
        _ -> counter(N)
    end.

%% The calls counted since the last count.
count(C) ->
    C ! {count, self()},
    receive {count, C, N} -> N after 10000 -> error(counter_stuck) end.

%% The calls this process made so far, once the VM has handed their trace
%% messages over (count/1 for the rest).
delivered_count(C) ->
    Ref = erlang:trace_delivered(self()),
    receive {trace_delivered, _, Ref} -> ok after 10000 -> error(not_delivered) end,
    count(C).

%% The folded file has work/1 in its stacks.
has_work(File) ->
    {ok, Bin} = file:read_file(File),
    ?assertMatch({match, _}, re:run(Bin, "kprof_trace_session_tests:work/1")).

left() ->
    kprof_test_util:leftovers().

kprof_left() ->
    kprof_test_util:kprof_tracers_left().
