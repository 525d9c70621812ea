%%% @doc The sink against an in-VM aggregator (`make bench-aggregator', issue 6
%%% benchmark 2).
%%%
%%% The same closed-loop workload (C client processes, each running R requests:
%%% http -> db gen_server -> template gen_server) three ways: untraced; with
%%% kprof tiers (trace messages to kprof_sink, aggregated in C); with the usual
%%% approach of kprof/eflame, a plain Erlang process tracer getting the same
%%% trace messages (same flags, same match specs) and aggregating self time
%%% per tier and request in Erlang. Per mode: the workload's requests/s and its
%%% slowdown against untraced, and for the aggregators the time until they had
%%% processed everything, their events/s and the process tracer's largest
%%% mailbox. Prints a table and rewrites the "Sink vs in-VM aggregator"
%%% section of bench/RESULTS.md.
-module(aggregator_bench).
-export([main/1, http/1, db/1, tpl/1, init/1, handle_call/3, handle_cast/2]).
-behaviour(gen_server).

-define(TIERS, [{http, [{?MODULE, http, 1}]}, {db, [{?MODULE, db, 1}]},
                {templating, [{?MODULE, tpl, 1}]}]).
-define(MS, [{'_', [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}}}}]}]).

%% Tier functions
http(N) -> burn(5), gen_server:call(agg_db, {q, N}), gen_server:call(agg_tpl, {r, N}).
db(N) -> burn(10), N.
tpl(N) -> burn(8), N.

burn(Us) ->
    T = erlang:monotonic_time(microsecond) + Us,
    spin(T).
spin(T) -> case erlang:monotonic_time(microsecond) >= T of true -> ok; false -> spin(T) end.

init(F) -> {ok, F}.
handle_call({_, N}, _From, F) -> {reply, ?MODULE:F(N), F}.
handle_cast(_, F) -> {noreply, F}.

main([CS, RS, Results]) ->
    C = list_to_integer(CS),
    R = list_to_integer(RS),
    {ok, _} = gen_server:start({local, agg_db}, ?MODULE, db, []),
    {ok, _} = gen_server:start({local, agg_tpl}, ?MODULE, tpl, []),
    ok = kprof:start(),
    Rounds = [{M, run(M, C, R)} || _ <- [1, 2, 3], M <- [untraced, sink, in_vm]],
    Med = fun(M, K) -> median([maps:get(K, X) || {M1, X} <- Rounds, M1 =:= M]) end,
    Base = Med(untraced, rps),
    Line = fun(M, Name) ->
                   Rps = Med(M, rps),
                   io_lib:format("| ~s | ~b | ~.1f | ~s | ~s | ~s |~n",
                                 [Name, round(Rps), 100 * (Base - Rps) / Base,
                                  fmt(Med(M, drain_ms)), fmt(Med(M, ev_per_s)),
                                  fmt(Med(M, max_mailbox))])
           end,
    Text = ["| mode | requests/s | slowdown % | until aggregated (ms) | events/s aggregated | largest mailbox |\n",
            "|---|--:|--:|--:|--:|--:|\n",
            Line(untraced, "untraced"), Line(sink, "kprof_sink (C)"),
            Line(in_vm, "in-VM process tracer (Erlang)"),
            io_lib:format("~nMedians of 3 rounds; ~b clients x ~b requests, closed loop; "
                          "each request: http (5 us) -> db gen_server (10 us) -> "
                          "template gen_server (8 us); 10 trace events a request (kprof adds 4 for its request markers).~n", [C, R])],
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Sink vs in-VM aggregator", Text),
    halt(0).

fmt(undefined) -> "-";
fmt(V) when is_float(V) -> io_lib:format("~.1f", [V]);
fmt(V) -> integer_to_list(V).

median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).

run(untraced, C, R) ->
    #{rps => workload(C, R, fun(F) -> F() end), drain_ms => undefined, ev_per_s => undefined,
      max_mailbox => undefined};
run(sink, C, R) ->
    ok = kprof:start_tiers(?TIERS, #{}),
    ok = kprof:sink_reset(),
    T0 = now_us(),
    Rps = workload(C, R, fun(F) -> kprof:request(get, F) end),
    T1 = now_us(),
    _ = kprof:sink_sync(),
    Drain = (now_us() - T1) / 1000,
    #{trace_events := Ev} = kprof:sink_stats(),
    ok = kprof:stop_tiers(),
    #{rps => Rps, drain_ms => Drain, ev_per_s => round(Ev / ((now_us() - T0) / 1.0e6)),
      max_mailbox => undefined};
run(in_vm, C, R) ->
    Self = self(),
    Agg = spawn(fun() -> aggregate(Self, #{}, #{}, 0, 0) end),
    Mon = spawn(fun() -> watch(Agg, 0) end),
    _ = [erlang:trace_pattern(MFA, ?MS, [local]) || {_, MFAs} <- ?TIERS, MFA <- MFAs],
    _ = erlang:trace(all, true, [call, arity, return_to, monotonic_timestamp, {tracer, Agg}]),
    T0 = now_us(),
    Rps = workload(C, R, fun(F) -> with_token(F) end),
    _ = erlang:trace(all, false, [all]),
    T1 = now_us(),
    Agg ! {done, self()},
    {Ev, _Totals} = receive {aggregated, E, Tot} -> {E, Tot} end,
    Drain = (now_us() - T1) / 1000,
    Mon ! {stop, self()},
    Max = receive {max_mailbox, M} -> M end,
    _ = [erlang:trace_pattern(MFA, false, [local]) || {_, MFAs} <- ?TIERS, MFA <- MFAs],
    #{rps => Rps, drain_ms => Drain, ev_per_s => round(Ev / ((now_us() - T0) / 1.0e6)),
      max_mailbox => Max}.

with_token(F) ->
    seq_trace:set_token(label, erlang:unique_integer([positive])),
    try F() after seq_trace:set_token([]) end.

%% C clients, R requests each; returns requests/s.
workload(C, R, Wrap) ->
    Self = self(),
    T0 = now_us(),
    Pids = [spawn(fun() ->
                          [Wrap(fun() -> ?MODULE:http(I) end) || I <- lists:seq(1, R)],
                          Self ! {client_done, self()}
                  end) || _ <- lists:seq(1, C)],
    [receive {client_done, P} -> ok end || P <- Pids],
    C * R / ((now_us() - T0) / 1.0e6).

%% The in-VM aggregator: per pid a stack of {Tier, Label}, self time per
%% {Label, Tier} from the timestamps (what kprof's Erlang version did).
aggregate(Parent, Stacks, Totals, Last, N) ->
    receive
        {trace_ts, Pid, call, {_, F, _}, {Token, _Caller}, Ts} ->
            Label = element(2, Token),
            St = maps:get(Pid, Stacks, []),
            Tot = credit(St, Ts, Totals),
            aggregate(Parent, Stacks#{Pid => [{F, Label, Ts} | St]}, Tot, Ts, N + 1);
        {trace_ts, Pid, return_to, _MFA, Ts} ->
            case maps:get(Pid, Stacks, []) of
                [] -> aggregate(Parent, Stacks, Totals, Last, N + 1);
                St = [_ | Rest] ->
                    Tot = credit(St, Ts, Totals),
                    aggregate(Parent, Stacks#{Pid => restart(Rest, Ts)}, Tot, Ts, N + 1)
            end;
        {trace_ts, _, _, _, _} ->
            aggregate(Parent, Stacks, Totals, Last, N + 1);
        {done, From} ->
            From ! {aggregated, N, Totals}
    end.

credit([{Tier, Label, Since} | _], Ts, Totals) ->
    K = {Label, Tier},
    Totals#{K => maps:get(K, Totals, 0) + (Ts - Since)};
credit([], _Ts, Totals) ->
    Totals.

restart([{Tier, Label, _} | Rest], Ts) -> [{Tier, Label, Ts} | Rest];
restart([], _) -> [].

watch(Pid, Max) ->
    receive {stop, From} -> From ! {max_mailbox, Max}
    after 5 ->
        case erlang:process_info(Pid, message_queue_len) of
            {message_queue_len, L} -> watch(Pid, max(L, Max));
            undefined -> watch(Pid, Max)
        end
    end.

now_us() -> erlang:monotonic_time(microsecond).
