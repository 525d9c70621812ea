%%% @doc The tiers' report data on this node, from what the server's polls
%%% of the sink gave: the window's slices (a poll every tenth of the window,
%%% the last ten merged), the rows in system time, the sink's counts since
%%% start or reset, and the map {@link kprof_tiers:node_report/0} returns.
%%% The polls themselves are here too: one at a time, in a process of its
%%% own, so the server never waits for its sink; kprof_tiers calls them
%%% with its state (kprof_tiers_state.hrl) and keeps what they return.
-module(kprof_tiers_window).

-include("kprof_tiers.hrl").
-include("kprof_tiers_state.hrl").

-export([poll_interval/1, add_slice/5, current_raw/3, to_system_time/1, sys_ms/1,
         sink_base/0, node_report/2]).
%% The server's polls (kprof_tiers calls them with its state)
-export([poll_timer/1, cancel_timer/1, start_poll/1, start_poll_if_waiting/1, next_poll/1,
         drop_poll/1, took/3, answer_waiting/2, reply_waiting/1, report_when_polled/2,
         no_answer/1, incomplete/1, state_report/2, state_info/1]).

-export_type([slice/0, view/0]).

-define(SLICES, 10).
%% How long a report waits for the sink (ms): kprof_tiers' ?REPORT_WAIT.
-define(REPORT_WAIT, 2000).
%% A poll's commands: a late answer is still taken (a window's slice is
%% cleared in the sink when it answers).
-define(POLL_TIMEOUT, 30000).
%% MFAs per identity in the report's full_trace.
-define(FULL_TOP, 100).
%% The sink is polled at least this often (ms) while tracing is on: what it
%% held at the last poll survives its death.
-define(POLL_MS, 1000).
%% The sink's stats the report counts since start or reset.
-define(DELTA_KEYS, [dropped, dropped_pids, dropped_mfas, dropped_names, bytes, ring_drops,
                     ring_unsupported, ring_unresolved, ring_bad]).

%% A poll's rows, from and until when (monotonic ns).
-type slice() :: {integer(), integer(), map()}.
%% What the server holds that a node's report is made of.
-type view() :: #{counters := undefined | counters:counters_ref(),
                  stats := map(), base := map(),
                  since := integer(), until := undefined | integer(),
                  snap := undefined | map(), slices := [slice()],
                  active := boolean(), aborted := term(), full := undefined | map(),
                  polled_at := undefined | integer(), incomplete := false | map(),
                  cost => undefined | kprof_tiers_cost:cost()}.

%% @doc How often the sink is polled (ms): a window every tenth of it (its
%% slices); at least once a second.
-spec poll_interval(undefined | number()) -> pos_integer().
poll_interval(undefined) -> ?POLL_MS;
poll_interval(W) -> min(?POLL_MS, max(10, round(W * 1000 / ?SLICES))).

%% @doc A poll's rows `Sys' from `From' until `Now' as the newest slice;
%% slices older than the window `W' (seconds, and half a slice of slack)
%% go.
-spec add_slice([slice()], integer(), integer(), map(), number()) -> [slice()].
add_slice(Slices, From, Now, Sys, W) ->
    WindowNs = round(W * 1.0e9),
    Slack = WindowNs div (2 * ?SLICES),
    [Sl || {T0, _, _} = Sl <- [{From, Now, Sys} | Slices], T0 >= Now - WindowNs - Slack].

%% @doc The rows of the last poll: the window's slices merged, or
%% everything since start/reset (`Snap').
-spec current_raw(#plan{}, undefined | map(), [slice()]) -> map().
current_raw(#plan{window = undefined, tiers = Tiers}, undefined, _Slices) ->
    kprof_report:empty_raw(length(Tiers));
current_raw(#plan{window = undefined}, Snap, _Slices) ->
    Snap;
current_raw(Plan, _Snap, Slices) ->
    Raws = [Raw || {_, _, Raw} <- lists:reverse(Slices)],
    kprof_report:merge_raw(slices, Raws, Plan#plan.slow_max, length(Plan#plan.tiers)).

%% @doc The sink's rows with their times (monotonic ns) in system time (ns).
-spec to_system_time(map()) -> map().
to_system_time(Raw = #{slow := Slow}) ->
    Offset = erlang:time_offset(nanosecond),
    Sys = fun(undefined) -> undefined; (T) -> T + Offset end,
    Raw#{first_ts => Sys(maps:get(first_ts, Raw)),
         last_ts => Sys(maps:get(last_ts, Raw)),
         slow => [S#{start := Sys(Start)} || #{start := Start} = S <- Slow]}.

%% @doc A monotonic time (ns) as system time (ms).
-spec sys_ms(undefined | integer()) -> undefined | integer().
sys_ms(undefined) -> undefined;
sys_ms(T) -> erlang:convert_time_unit(T + erlang:time_offset(nanosecond), nanosecond,
                                      millisecond).

%% @doc The sink's counts the report gives since start or reset, as they
%% are now.
-spec sink_base() -> #{atom() => non_neg_integer()}.
sink_base() ->
    maps:with(?DELTA_KEYS, sink_stats()).

%% @doc This node's report. The counts of the sink are since start or reset
%% (its stats at the last poll less those at start): trace messages it lost
%% (`dropped'), new keys its tables refused, and the tracer NIF's ring:
%% events lost because the ring was full (`ring_drops'), events the NIF
%% could not encode (`ring_unsupported': an identity too big for a record,
%% ...), events of a pid the sink's table refused (`ring_unresolved') and
%% records it could not take (`ring_bad': a new MFA refused at a full
%% table, a malformed record).
-spec node_report(#plan{}, view()) -> kprof_tiers:node_report().
node_report(Plan, V = #{counters := C, stats := Stats, base := Base, since := Since,
                        slices := Slices}) ->
    Now = case maps:get(until, V) of
              undefined -> erlang:monotonic_time(nanosecond);
              Until -> Until
          end,
    Traced = case {Plan#plan.window, Slices} of
                 {undefined, _} -> Now - Since;
                 {_, []} -> Now - Since;
                 {_, _} -> Now - lists:min([T0 || {T0, _, _} <- Slices])
             end,
    Get = fun(I) -> count(C, I) end,
    D = fun(K) -> delta(K, Stats, Base) end,
    #{node => node(),
      tiers => [Name || {Name, _} <- Plan#plan.tiers],
      raw => current_raw(Plan, maps:get(snap, V), Slices),
      seen => Get(?SEEN),
      sampled => Get(?SAMPLED),
      traced_ns => max(0, Traced),
      window => Plan#plan.window,
      active => maps:get(active, V),
      aborted => maps:get(aborted, V),
      sink_dropped => D(dropped),
      sink_dropped_pids => D(dropped_pids),
      sink_dropped_mfas => D(dropped_mfas),
      sink_dropped_names => D(dropped_names),
      ring_drops => D(ring_drops),
      ring_unsupported => D(ring_unsupported),
      ring_unresolved => D(ring_unresolved),
      ring_bad => D(ring_bad),
      full_trace => case Plan#plan.full of
                        false -> undefined;
                        _ -> maps:get(full, V)
                    end,
      bytes => D(bytes),
      reapplied => Get(?REAPPLIED),
      slow_max => Plan#plan.slow_max,
      incomplete => maps:get(incomplete, V),
      polled_at => sys_ms(maps:get(polled_at, V)),
      overhead => kprof_tiers_cost:info(maps:get(cost, V, undefined))}.

-spec count(undefined | counters:counters_ref(), pos_integer()) -> non_neg_integer().
count(undefined, _I) -> 0;
count(C, I) -> counters:get(C, I).

-spec sink_stats() -> map().
sink_stats() ->
    case kprof_sink:command(stats) of
        #{} = Stats -> Stats;
        _ -> #{}
    end.

%% Since start or reset; a sink reset or restart in between starts again
%% from zero.
-spec delta(atom(), map(), map()) -> non_neg_integer().
delta(Key, Stats, Base) ->
    Now = maps:get(Key, Stats, 0),
    Then = maps:get(Key, Base, 0),
    case Now >= Then of
        true -> Now - Then;
        false -> Now
    end.

%%% The server's polls: the sink's rows, at least once a second while tracing is on

%% @private A step of kprof_tiers' polls, on its state.
-spec poll_timer(#plan{}) -> reference().
poll_timer(#plan{window = W}) ->
    erlang:start_timer(poll_interval(W), self(), poll).

%% @private A step of kprof_tiers' polls, on its state.
-spec cancel_timer(#state{}) -> #state{}.
cancel_timer(S = #state{timer = undefined}) ->
    S;
cancel_timer(S = #state{timer = TRef}) ->
    _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
    S#state{timer = undefined}.

%% @private One poll at a time, in a process of its own: the server never waits for
%% the sink, whose reply may take long (a late one is still taken: a window's
%% slice is cleared in the sink when it answers). Without a window the sink's
%% report since start is kept whole; with one it is cleared into slices. A
%% poll flushes (the sink finalises every ended request without waiting for
%% its grace window) for a report, after tracing stopped, or when no event
%% came between the last two polls (no straggler is coming either: requests
%% ended before a quiet spell would otherwise wait for the next event).
-spec start_poll(#state{}) -> #state{}.
start_poll(S = #state{poll = #poll{}}) -> S;
start_poll(S = #state{plan = undefined}) -> S;
start_poll(S = #state{cleaning = {_, _, _}}) -> S;
start_poll(S = #state{sink_lost = #{}}) -> S;
start_poll(S = #state{active = false, final = true}) -> S;
start_poll(S = #state{plan = Plan, port = Port, active = Active}) ->
    Flush = not Active orelse S#state.quiet orelse S#state.waiting =/= [],
    Raw = case Plan#plan.window of
              undefined -> {tiers_report, Flush};
              _ -> {tiers_report, Flush, true}
          end,
    Steps = [{raw, Raw}, {stats, stats}]
        ++ [{full, {tiers_full_report, ?FULL_TOP}} || Plan#plan.full =/= false],
    Ref = make_ref(),
    Self = self(),
    Pid = spawn_link(fun() -> Self ! {poll_done, Ref, poll_sink(Port, Steps)} end),
    S#state{poll = #poll{ref = Ref, pid = Pid, started = now_ns(), final = not Active}}.

%% @private A step of kprof_tiers' polls, on its state.
-spec start_poll_if_waiting(#state{}) -> #state{}.
start_poll_if_waiting(S = #state{waiting = []}) -> S;
start_poll_if_waiting(S) -> start_poll(S).

%% @private Stopped and the last poll not taken yet: take it; else for reports.
-spec next_poll(#state{}) -> #state{}.
next_poll(S = #state{active = false, final = false}) -> start_poll(S);
next_poll(S) -> start_poll_if_waiting(S).

%% The poll's commands, in order, to the sink the tiers started on; a new
%% sink knows nothing of them.
-spec poll_sink(port(), [{atom(), term()}]) ->
          {ok | timeout, map()} | {lost, term(), map()}.
poll_sink(Port, Steps) ->
    case kprof_sink:port() of
        Port -> poll_steps(Steps, #{});
        _ -> {lost, sink_restarted, #{}}
    end.

-spec poll_steps([{atom(), term()}], map()) -> {ok | timeout, map()} | {lost, term(), map()}.
poll_steps([], Acc) ->
    {ok, Acc};
poll_steps([{Key, Cmd} | Rest], Acc) ->
    case kprof_sink:command(Cmd, ?POLL_TIMEOUT) of
        {error, timeout} -> {timeout, Acc};
        {error, {sink_down, _} = Why} -> {lost, Why, Acc};
        {error, not_running} -> {lost, not_running, Acc};
        {error, not_started} when Key =:= raw -> {lost, sink_restarted, Acc};
        Reply -> poll_steps(Rest, Acc#{Key => Reply})
    end.

%% @private A poll that may still be writing to the sink is stopped (what it wrote
%% comes before whatever the server writes next); its answer is not taken.
-spec drop_poll(#state{}) -> #state{}.
drop_poll(S = #state{poll = undefined}) ->
    S;
drop_poll(S = #state{poll = #poll{pid = Pid, ref = Ref}}) ->
    unlink(Pid),
    exit(Pid, kill),
    receive {poll_done, Ref, _} -> ok after 0 -> ok end,
    S#state{poll = undefined}.

%% @private A step of kprof_tiers' polls, on its state.
-spec took(#poll{}, map(), #state{}) -> #state{}.
took(#poll{started = T}, Acc, S = #state{plan = Plan}) ->
    S1 = case Acc of
             #{raw := #{rows := Rows, slow := Slow, first_ts := _, last_ts := LastTs} = Raw}
               when is_list(Rows), is_list(Slow) ->
                 Sys = to_system_time(Raw),
                 Polled = S#state{polled_at = T, polls = S#state.polls + 1, last_ts = LastTs,
                                  quiet = LastTs =:= S#state.last_ts},
                 case Plan#plan.window of
                     undefined ->
                         Polled#state{snap = Sys};
                     W ->
                         Slices = add_slice(S#state.slices,
                                                               S#state.slice_from, T, Sys, W),
                         Polled#state{slices = Slices, slice_from = T}
                 end;
             _ ->
                 S
         end,
    %% Anything else the sink says (an error) is not taken: the last
    %% answer stands.
    S2 = case Acc of
             #{stats := #{} = Stats} -> S1#state{stats = Stats, cost = cost(Stats, S1)};
             _ -> S1
         end,
    case Acc of
        #{full := #{identities := _} = Full} -> S2#state{full = Full};
        _ -> S2
    end.

%% The estimate of what tracing costs, with this poll's count of events.
-spec cost(map(), #state{}) -> undefined | kprof_tiers_cost:cost().
cost(#{trace_events := Events}, #state{cost = Cost, active = Active}) when Cost =/= undefined ->
    kprof_tiers_cost:update(Events, Cost, Active);
cost(_, #state{cost = Cost}) ->
    Cost.

%% @private Reports asked before this poll was sent have their answer; later ones
%% wait for the next poll (sent at once).
-spec answer_waiting(#poll{}, #state{}) -> #state{}.
answer_waiting(#poll{started = T, final = Final}, S = #state{waiting = Waiting}) ->
    {Done, Later} = lists:partition(fun({_, At, _}) -> Final orelse At =< T end, Waiting),
    _ = [answer(W, false, S) || W <- Done],
    next_poll(S#state{waiting = Later}).

%% @private A step of kprof_tiers' polls, on its state.
-spec reply_waiting(#state{}) -> #state{}.
reply_waiting(S = #state{waiting = Waiting}) ->
    _ = [answer(W, incomplete(S), S) || W <- Waiting],
    S#state{waiting = []}.

-spec answer({gen_server:from(), integer(), reference()}, false | map(), #state{}) -> ok.
answer({From, _At, TRef}, Incomplete, S) ->
    _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
    gen_server:reply(From, {ok, state_report(Incomplete, S)}).

%% @private A report: at once when nothing more can come from the sink (it died, or
%% its last poll after the tiers stopped was taken); otherwise once a poll
%% sent after this call is answered, or after ?REPORT_WAIT with the last
%% poll's rows, said to be incomplete.
-spec report_when_polled(gen_server:from(), #state{}) ->
          {reply, term(), #state{}} | {noreply, #state{}}.
report_when_polled(_From, S = #state{sink_lost = #{}}) ->
    {reply, {ok, state_report(incomplete(S), S)}, S};
report_when_polled(_From, S = #state{active = false, final = true}) ->
    {reply, {ok, state_report(false, S)}, S};
report_when_polled(From, S = #state{waiting = Waiting}) ->
    TRef = erlang:start_timer(?REPORT_WAIT, self(), {report_wait, From}),
    {noreply, start_poll(S#state{waiting = [{From, now_ns(), TRef} | Waiting]})}.

%% @private A step of kprof_tiers' polls, on its state.
-spec incomplete(#state{}) -> false | map().
incomplete(#state{sink_lost = false}) -> false;
incomplete(#state{sink_lost = Lost}) -> Lost.

%% @private A step of kprof_tiers' polls, on its state.
-spec no_answer(#state{}) -> map().
no_answer(S) ->
    #{reason => no_answer, waited_ms => ?REPORT_WAIT, at => erlang:system_time(millisecond),
      polled_at => sys_ms(S#state.polled_at)}.

%% @private The report's data as of the last poll.
-spec state_report(false | map(), #state{}) -> kprof_tiers:node_report().
state_report(Incomplete, S = #state{plan = Plan}) ->
    node_report(
      Plan, #{counters => S#state.counters, stats => S#state.stats, base => S#state.base,
              since => S#state.since, until => S#state.until, snap => S#state.snap,
              slices => S#state.slices, active => S#state.active,
              aborted => S#state.aborted, full => S#state.full,
              polled_at => S#state.polled_at, incomplete => Incomplete,
              cost => S#state.cost}).

%% @private A step of kprof_tiers' polls, on its state.
-spec state_info(#state{}) -> map().
state_info(S = #state{plan = Plan, active = Active, nodes = Nodes, aborted = Aborted,
                      counters = C}) ->
    Counts = case C of
                 undefined -> #{seen => 0, sampled => 0, reapplied => 0};
                 _ -> #{seen => counters:get(C, ?SEEN), sampled => counters:get(C, ?SAMPLED),
                        reapplied => counters:get(C, ?REAPPLIED)}
             end,
    Tiers = case Plan of
                undefined -> [];
                #plan{tiers = T} -> T
            end,
    Polled = case {Plan, S#state.polled_at} of
                 {#plan{}, T0} when is_integer(T0) ->
                     #{requests => maps:get(requests,
                                         current_raw(
                                           Plan, S#state.snap, S#state.slices))};
                 _ ->
                     #{requests => 0}
             end,
    Counts#{active => Active, tiers => Tiers, nodes => Nodes, aborted => Aborted,
            sample => case Plan of undefined -> undefined; _ -> Plan#plan.sample end,
            window => case Plan of undefined -> undefined; _ -> Plan#plan.window end,
            polls => S#state.polls, polled_at => sys_ms(S#state.polled_at),
            polled => Polled, sink_lost => S#state.sink_lost,
            overhead => kprof_tiers_cost:info(S#state.cost)}.

-spec now_ns() -> integer().
now_ns() ->
    erlang:monotonic_time(nanosecond).
