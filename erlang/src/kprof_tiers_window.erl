%%% @doc The tiers' report data on this node, from what the server's polls
%%% of the sink gave: the window's slices (a poll every tenth of the window,
%%% the last ten merged), the rows in system time, the sink's counts since
%%% start or reset, and the map {@link kprof_tiers:node_report/0} returns.
%%% Functions of their arguments: the server keeps the state.
-module(kprof_tiers_window).

-include("kprof_tiers.hrl").

-export([poll_interval/1, add_slice/5, current_raw/3, to_system_time/1, sys_ms/1,
         sink_base/0, node_report/2]).

-export_type([slice/0, view/0]).

-define(SLICES, 10).
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
                  polled_at := undefined | integer(), incomplete := false | map()}.

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
      polled_at => sys_ms(maps:get(polled_at, V))}.

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
