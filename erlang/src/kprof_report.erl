%%% @doc The tier report: sink reports merged (window slices, nodes),
%%% then a map; {@link kprof_report_render} lays that map out as a text
%%% table or JSON. It only merges and builds the data it is given: the
%%% nodes' reports are fetched by {@link kprof_tiers_cluster}.
%%%
%%% The sink's report (doc/internals-tiers.md) has one row per request identity,
%%% with a histogram per tier. Reports of several slices of a window or of
%%% several nodes merge exactly: rows by identity, histograms by adding
%%% bucket counts ({@link kprof_hist}). {@link build/2} turns node reports
%%% into the {@type report()} map that `kprof:report(#{format => term})'
%%% returns; every duration in it is in milliseconds:
%%%
%%% ```
%%% #{tiers => [http, database, templating], time => self,
%%%   nodes => [a@host], traced_s => 10.0, window_s => undefined,
%%%   seen => 120400, sampled => 12040, requests => 12040, events => 240800,
%%%   dropped => 0, bytes => 2408000, aborted => [Abort], active => true,
%%%   dropped_requests => 0, dropped_events => 0, abandoned => 0, % the tiers' caps
%%%   killed_requests => 0,                    % their process exited before their end
%%%   sink_dropped => 0,                       % trace messages the sink lost
%%%   sink_dropped_pids => 0, sink_dropped_mfas => 0, sink_dropped_names => 0,
%%%   ring_drops => 0, ring_unsupported => 0,  % the tracer NIF's ring: full, not encodable
%%%   ring_unresolved => 0, ring_bad => 0,     % ... a refused pid's events, refused records
%%%   incomplete => [Incomplete],              % [] when every sink answered
%%%   missing => [{Node, Reason}],             % nodes that did not reply: [] when all did
%%%   reapplied => 0, ...,                     % patterns put back after a code reload
%%%   all => Row, rows => [Row],               % most requests first
%%%   slow => [#{identity, node, pid, start, wall, tiers, other}],
%%%   full_trace => undefined | Full,          % option full_trace of start_tiers
%%%   overhead => [Overhead]}                  % what tracing costs, per node
%%% Overhead = #{node, per_event_ns, events_per_s, vm_cpu, sink_cpu, % cores
%%%              share,                        % of the VM's and the sink's CPU
%%%              sample, max_overhead, lowered}  % kprof_tiers_cost:info/1
%%% Abort = #{node, reason => overload, info => Info, time => <<"2026-...Z">>,
%%%           message => <<"overload (lag 1.8 s > 1.0 s)">>}
%%% Incomplete = #{node, reason => no_answer | sink_died, at => <<"2026-...Z">>,
%%%                polled_at => <<"2026-...Z">> | undefined,   % the rows are as of then
%%%                waited_ms => 2000,          % no_answer
%%%                detail => Status}           % sink_died
%%% Full = #{requests, dropped_requests, dropped_events, dropped_nodes, truncated,
%%%          filtered_events,
%%%          identities => [#{identity, requests, truncated, total, dropped_nodes,
%%%                           mfas => [#{mfa, calls, inclusive, self}]}]}
%%% Row = #{identity => {users, get}, requests => 8100,
%%%         tiers => [#{tier => http, calls => 8100, self => Stats, inclusive => Stats}],
%%%         other => Stats, wall => Stats}
%%% Stats = #{count, mean, min, max, p50, p90, p99, p999}
%%% '''
%%% `all' merges every row. In JSON, an identity is its `~0p' text unless
%%% it is a binary or an atom. In `full_trace', an identity's `mfas' are
%%% its functions with the largest inclusive time first (at most 100 per
%%% node), times summed over its requests (and over processes: a function
%%% open in two processes at once counts twice); `total' is the time of
%%% every process of its requests.
%%%
%%% An abort's `message' is {@link kprof_guard}'s text for it when the
%%% guard's last abort on that node is this one (the guard aborted the
%%% tiers), else the reason and info as text. `sink_dropped_pids',
%%% `sink_dropped_mfas' and `sink_dropped_names' are the sink's new keys
%%% refused at its tables' caps (doc/internals-protocol.md), since start or reset.
%%%
%%% `dropped' (the header's figure) is every request and event lost:
%%% `dropped_requests' and `dropped_events' (the tiers' caps),
%%% `sink_dropped' (trace messages the sink decoded but could not record:
%%% a table full), and the tracer NIF's ring: `ring_drops' (events lost,
%%% the ring full), `ring_unsupported' (events the NIF could not encode:
%%% an identity over what a record holds, about 64 KiB), `ring_unresolved'
%%% (events of a pid the sink's table refused) and `ring_bad' (records the
%%% sink could not take: a new MFA at a full table, a malformed record; a
%%% refused pid's own definition counts here too), each since start or
%%% reset, each on the `dropped:' line when not 0. `incomplete' says which
%%% sinks did not answer the report in time (their rows are those of the
%%% server's last poll) or died (what they read after it is lost); the
%%% text's header ends with `; INCOMPLETE: ...' then. `missing' names the
%%% nodes asked that gave no report at all, with why (`noconnection',
%%% `timeout', `kprof_not_loaded', or the error the node answered); the
%%% header ends with `; MISSING: ...' then.
-module(kprof_report).

-include("kprof_report.hrl").

-export([empty_raw/1, merge_raw/4, build/2, build/3]).
-export([sort/2, is_stat/1]).

-export_type([report/0, row/0, stats/0, sort/0]).

%% The rows' order: a column, largest first (identity: in term order).
-type sort() :: requests | identity | wall | other | Tier :: atom()
              | {wall | other | Tier :: atom(), stat()}.
-type stat() :: mean | p50 | p90 | p99 | p999 | max | min | count.

-type stats() :: #{count := non_neg_integer(), mean := float(), min := float(),
                   max := float(), p50 := float(), p90 := float(), p99 := float(),
                   p999 := float()}.
-type row() :: #{identity := term(), requests := non_neg_integer(),
                 tiers := [#{tier := atom(), calls := non_neg_integer(),
                             self := stats(), inclusive := stats()}],
                 other := stats(), wall := stats()}.
-type report() :: #{atom() => term()}.
%% The sink's report (doc/internals-tiers.md, "The report"), times in ns.
-type raw() :: #{atom() => term()}.
-type raw_row() :: #{identity := term(), requests := non_neg_integer(),
                     tiers := [#{calls := non_neg_integer(), atom() => kprof_hist:hist()}],
                     other := kprof_hist:hist(), wall := kprof_hist:hist()}.

%% The statistics of a tier column the report always has (the text shows
%% them), whatever the sink's `stats' add.
-define(TIME_STATS, #{self => ns, inclusive => ns}).
-define(SUMS, [requests, events, abandoned, killed_requests, truncated, dropped_requests,
               dropped_events, orphan_events, folded_requests]).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% MERGING THE SINK'S REPORTS %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% @doc A sink report with nothing in it.
-spec empty_raw(non_neg_integer()) -> raw().
empty_raw(NTiers) ->
    Zeros = maps:from_list([{K, 0} || K <- ?SUMS ++ [inflight, identities]]),
    Zeros#{active => false, ntiers => NTiers, first_ts => undefined,
           last_ts => undefined, stats => [], rows => [], slow => []}.

%% @doc Merge sink reports (times already in system time): `slices' of
%% one sink, oldest first (gauges such as `inflight' are the newest's),
%% or `nodes' (gauges add up). Rows merge by identity, histograms
%% exactly; the `SlowMax' slowest requests stay.
-spec merge_raw(slices | nodes, [raw()], non_neg_integer(), non_neg_integer()) -> raw().
merge_raw(Mode, Raws, SlowMax, NTiers) ->
    Merged = lists:foldl(fun(R, Acc) -> merge2(Mode, Acc, R, SlowMax) end,
                         empty_raw(NTiers), Raws),
    Merged#{identities => length(maps:get(rows, Merged))}.

-spec merge2(slices | nodes, raw(), raw(), non_neg_integer()) -> raw().
merge2(Mode, A, B, SlowMax) ->
    Sums = maps:from_list([{K, maps:get(K, A, 0) + maps:get(K, B, 0)} || K <- ?SUMS]),
    Gauges = case Mode of
                 slices ->
                     #{inflight => maps:get(inflight, B, 0),
                       active => maps:get(active, B, false)};
                 nodes ->
                     #{inflight => maps:get(inflight, A, 0) + maps:get(inflight, B, 0),
                       active => maps:get(active, A, false) orelse maps:get(active, B, false)}
             end,
    Slow = lists:sublist(lists:sort(fun(#{wall := W1}, #{wall := W2}) -> W1 >= W2 end,
                                    maps:get(slow, A) ++ maps:get(slow, B)),
                         SlowMax),
    %% The statistics of a tier column, as the sinks name them (one layout).
    Stats = case maps:get(stats, A, []) of
                [] -> maps:get(stats, B, []);
                StatsA -> StatsA
            end,
    maps:merge(Sums, Gauges#{ntiers => maps:get(ntiers, A), stats => Stats,
                             first_ts => ts(fun min/2, maps:get(first_ts, A), maps:get(first_ts, B)),
                             last_ts => ts(fun max/2, maps:get(last_ts, A), maps:get(last_ts, B)),
                             rows => merge_rows(maps:get(rows, A), maps:get(rows, B)),
                             slow => Slow}).

-spec ts(fun((integer(), integer()) -> integer()), integer() | undefined,
         integer() | undefined) -> integer() | undefined.
ts(_, undefined, T) -> T;
ts(_, T, undefined) -> T;
ts(F, T1, T2) -> F(T1, T2).

%% Rows by identity; a row's columns, `other' and `wall' merged exactly.
-spec merge_rows([raw_row()], [raw_row()]) -> [raw_row()].
merge_rows(RowsA, RowsB) ->
    ById = lists:foldl(fun(R = #{identity := Id}, Acc) ->
                               maps:update_with(Id, fun(R0) -> merge_row(R0, R) end, R, Acc)
                       end, #{}, RowsA ++ RowsB),
    maps:values(ById).

-spec merge_row(raw_row(), raw_row()) -> raw_row().
merge_row(A = #{requests := NA, tiers := TA, other := OA, wall := WA},
          #{requests := NB, tiers := TB, other := OB, wall := WB}) ->
    A#{requests := NA + NB, tiers := lists:zipwith(fun merge_col/2, TA, TB),
       other := kprof_hist:merge(OA, OB), wall := kprof_hist:merge(WA, WB)}.

%% A tier's column: its counts added, its histograms merged, whatever
%% statistics the sink has (port/tiers/ks_tiers.h's KS_TIER_STATS).
-spec merge_col(map(), map()) -> map().
merge_col(A, B) ->
    maps:merge_with(fun(_K, X, Y) when is_integer(X) -> X + Y;
                       (_K, X, Y) -> kprof_hist:merge(X, Y)
                    end, A, B).

%%%%%%%%%%%%%%%%%%%%%%%%%
%%% BUILDING A REPORT %%%
%%%%%%%%%%%%%%%%%%%%%%%%%

%% @doc The report of these nodes (the replies of
%% `kprof_tiers:node_report/0'), merged. Option `time' (`self') says
%% which time the text table shows.
-spec build([kprof_tiers:node_report()], map()) -> {ok, report()} | {error, term()}.
build(NodeReports, Opts) ->
    build(NodeReports, [], Opts).

%% @doc {@link build/2} of the nodes that replied; `Missing' are those
%% that did not, with why, kept in the report's `missing'.
-spec build([kprof_tiers:node_report()], [{node(), term()}], map()) ->
          {ok, report()} | {error, term()}.
build([], _Missing, _Opts) ->
    {error, no_nodes};
build([First | _] = NodeReports, Missing, Opts) ->
    Tiers = maps:get(tiers, First),
    case [N || #{node := N, tiers := T} <- NodeReports, T =/= Tiers] of
        [] -> {ok, (build(Tiers, First, NodeReports, Opts))#{missing => Missing}};
        [Node | _] -> {error, {tiers_differ, Node}}
    end.

-spec build([atom()], kprof_tiers:node_report(), [kprof_tiers:node_report()], map()) ->
          report().
build(Tiers, First, NodeReports, Opts) ->
    SlowMax = lists:max([maps:get(slow_max, R) || R <- NodeReports]),
    NTiers = length(Tiers),
    Raw = merge_raw(nodes, [maps:get(raw, R) || R <- NodeReports], SlowMax, NTiers),
    Sum = fun(K) -> lists:sum([maps:get(K, R) || R <- NodeReports]) end,
    Units = maps:merge(?TIME_STATS, maps:from_list(maps:get(stats, Raw, []))),
    Rows = lists:sort(fun(#{requests := A, identity := IA}, #{requests := B, identity := IB}) ->
                              {B, IA} =< {A, IB}
                      end, [row(Tiers, Units, R) || R <- maps:get(rows, Raw)]),
    All = row(Tiers, Units, all_row(NTiers, Units, maps:get(rows, Raw))),
    SinkDropped = Sum(sink_dropped),
    Opt = fun(K) -> lists:sum([maps:get(K, R, 0) || R <- NodeReports]) end,
    RingDropped = lists:sum([Opt(K) || K <- ?RING_DROPS]),
    Report = #{nodes => [N || #{node := N} <- NodeReports],
      tiers => Tiers,
      time => maps:get(time, Opts, self),
      traced_s => lists:max([maps:get(traced_ns, R) || R <- NodeReports]) / 1.0e9,
      window_s => maps:get(window, First),
      active => lists:all(fun(R) -> maps:get(active, R) end, NodeReports),
      aborted => [#{node => N, reason => Reason, info => Info, time => rfc3339(Time),
                    message => abort_message(R, Reason, Info)}
                  || #{node := N, aborted := {Reason, Info, Time}} = R <- NodeReports],
      incomplete => [incomplete(N, I) || #{node := N} = R <- NodeReports,
                                         I <- [maps:get(incomplete, R, false)], I =/= false],
      seen => Sum(seen),
      sampled => Sum(sampled),
      bytes => Sum(bytes),
      sink_dropped => SinkDropped,
      reapplied => lists:sum([maps:get(reapplied, R, 0) || R <- NodeReports]),
      dropped => maps:get(dropped_requests, Raw) + maps:get(dropped_events, Raw) + SinkDropped
          + RingDropped,
      requests => maps:get(requests, Raw),
      inflight => maps:get(inflight, Raw),
      events => maps:get(events, Raw),
      abandoned => maps:get(abandoned, Raw),
      killed_requests => maps:get(killed_requests, Raw),
      truncated => maps:get(truncated, Raw),
      dropped_requests => maps:get(dropped_requests, Raw),
      dropped_events => maps:get(dropped_events, Raw),
      orphan_events => maps:get(orphan_events, Raw),
      folded_requests => maps:get(folded_requests, Raw),
      reported_at => rfc3339(erlang:system_time(millisecond)),
      all => All,
      rows => Rows,
      slow => [slow(Tiers, S) || S <- maps:get(slow, Raw)],
      full_trace => full_trace([F || R <- NodeReports,
                                     F <- [maps:get(full_trace, R, undefined)], F =/= undefined]),
      overhead => [O#{node => N} || #{node := N, overhead := O} <- NodeReports, is_map(O)]},
    maps:merge(Report, maps:from_list([{K, Sum(K)} || K <- ?TABLE_DROPS]
                                      ++ [{K, Opt(K)} || K <- ?RING_DROPS])).

%% Why a node's rows are not all there, and as of when they are.
-spec incomplete(node(), map()) -> map().
incomplete(Node, I) ->
    Time = fun(undefined) -> undefined; (Ms) -> rfc3339(Ms) end,
    maps:merge(I, #{node => Node, at => Time(maps:get(at, I, undefined)),
                    polled_at => Time(maps:get(polled_at, I, undefined))}).

%% The guard's message for this abort ("overload (lag 2.4 s > 300 ms)"):
%% its status on that node holds its last abort, with the kind and info it
%% gave the tiers' abort function. An abort it did not make (the tiers saw
%% the sink die, kprof_tiers:abort/2 was called) is its reason and info.
-spec abort_message(map(), term(), term()) -> binary().
abort_message(_NodeReport, _Reason, #{message := Message}) ->
    unicode:characters_to_binary(Message);
abort_message(NodeReport, Reason, Info) ->
    %% The guard's last abort, as the node's report gives it
    %% (kprof_tiers:node_report/0): this module asks no node for anything.
    Guard = maps:get(guard_abort, NodeReport, undefined),
    case Guard of
        #{kind := Reason, info := Info, message := Message} ->
            unicode:characters_to_binary(Message);
        _ ->
            unicode:characters_to_binary(io_lib:format("~0tp ~0tp", [Reason, Info]))
    end.

%% The sinks' full-trace aggregates merged by identity, and by MFA in each.
-spec full_trace([map()]) -> undefined | map().
full_trace([]) ->
    undefined;
full_trace(Fulls) ->
    Sum = fun(K) -> lists:sum([maps:get(K, F, 0) || F <- Fulls]) end,
    ById = lists:foldl(
             fun(A = #{identity := Id}, Acc) ->
                     maps:update_with(Id, fun(B) -> merge_full(A, B) end, A, Acc)
             end, #{}, [IA || F <- Fulls, IA <- maps:get(identities, F, [])]),
    Ids = lists:sort(fun(#{requests := A, identity := IA}, #{requests := B, identity := IB}) ->
                             {B, IA} =< {A, IB}
                     end, [full_identity(A) || A <- maps:values(ById)]),
    #{requests => Sum(requests), dropped_requests => Sum(dropped_requests),
      dropped_events => Sum(dropped_events), truncated => Sum(truncated),
      filtered_events => Sum(filtered_events),
      dropped_nodes => lists:sum([D || #{dropped_nodes := D} <- Ids]), identities => Ids}.

-spec merge_full(map(), map()) -> map().
merge_full(A, B) ->
    Mfas = lists:foldl(fun(M = #{mfa := MFA}, Acc) ->
                               maps:update_with(MFA, fun(M0) -> add_counts(M0, M) end, M, Acc)
                       end, #{}, maps:get(mfas, A) ++ maps:get(mfas, B)),
    Sums = maps:from_list([{K, maps:get(K, A, 0) + maps:get(K, B, 0)}
                           || K <- [requests, events, truncated, dropped_nodes, total_ns]]),
    Sums#{identity => maps:get(identity, A), mfas => maps:values(Mfas)}.

%% The integers of two maps of the same keys added.
-spec add_counts(map(), map()) -> map().
add_counts(A, B) ->
    maps:merge_with(fun(_K, X, Y) when is_integer(X) -> X + Y; (_K, X, _Y) -> X end, A, B).

-spec full_identity(map()) -> map().
full_identity(A = #{identity := Id}) ->
    Mfas = lists:sort(fun(#{mfa := M1, inclusive_ns := I1, self_ns := S1},
                          #{mfa := M2, inclusive_ns := I2, self_ns := S2}) ->
                              {I2, S2, M1} =< {I1, S1, M2}
                      end, maps:get(mfas, A)),
    #{identity => Id, requests => maps:get(requests, A), truncated => maps:get(truncated, A),
      total => ms(maps:get(total_ns, A)), dropped_nodes => maps:get(dropped_nodes, A),
      mfas => [#{mfa => MFA, calls => C, inclusive => ms(I), self => ms(S)}
               || #{mfa := MFA, calls := C, inclusive_ns := I, self_ns := S} <- Mfas]}.

%% Every row merged into one, `all' (with every statistic, rows or none).
-spec all_row(non_neg_integer(), #{atom() => ns | count}, [raw_row()]) -> raw_row().
all_row(NTiers, Units, Rows) ->
    Empty = kprof_hist:empty(),
    Col0 = maps:from_list([{calls, 0} | [{K, Empty} || K <- maps:keys(Units)]]),
    Row0 = #{identity => all, requests => 0, other => Empty, wall => Empty,
             tiers => lists:duplicate(NTiers, Col0)},
    lists:foldl(fun(R, Acc) -> merge_row(Acc, R) end, Row0, Rows).

%% A sink's row as the report gives it: per tier its counts and the
%% statistics of its histograms, in their unit (`Units', the sink's
%% `stats': ns as ms).
-spec row([atom()], #{atom() => ns | count}, raw_row()) -> row().
row(Tiers, Units, #{identity := Identity, requests := Requests, tiers := Cols,
                    other := Other, wall := Wall}) ->
    #{identity => Identity,
      requests => Requests,
      tiers => [column(Name, Units, Col) || {Name, Col} <- lists:zip(Tiers, Cols)],
      other => stats(ns, Other),
      wall => stats(ns, Wall)}.

-spec column(atom(), #{atom() => ns | count}, map()) -> map().
column(Name, Units, Col) ->
    Stats = maps:map(fun(K, V) ->
                             case Units of
                                 #{K := Unit} -> stats(Unit, V);
                                 _ -> V
                             end
                     end, Col),
    Stats#{tier => Name}.

%% A histogram's statistics: in ms of its ns, or as counted.
-spec stats(ns | count, kprof_hist:hist()) -> stats().
stats(Unit, H = #{count := Count, min := Min, max := Max}) ->
    V = case Unit of
            ns -> fun ms/1;
            count -> fun(X) -> X end
        end,
    [P50, P90, P99, P999] = kprof_hist:quantiles(H),
    Mean = case Unit of
               ns -> ms(kprof_hist:mean(H));
               count -> kprof_hist:mean(H)
           end,
    #{count => Count, mean => Mean, min => V(Min), max => V(Max),
      p50 => V(P50), p90 => V(P90), p99 => V(P99), p999 => V(P999)}.

-spec slow([atom()], map()) -> map().
slow(Tiers, S = #{pid := Pid, start := Start, wall := Wall, tiers := Cols, other := Other}) ->
    S#{node => case is_pid(Pid) of true -> node(Pid); false -> undefined end,
       start => rfc3339(Start div 1000000),
       wall => ms(Wall),
       tiers => [#{tier => Name, calls => C, self => ms(Self), inclusive => ms(Incl)}
                 || {Name, #{calls := C, self := Self, inclusive := Incl}}
                        <- lists:zip(Tiers, Cols)],
       other => ms(Other)}.

-spec ms(number()) -> float().
ms(Ns) ->
    Ns / 1.0e6.

-spec rfc3339(integer()) -> binary().
rfc3339(Ms) ->
    list_to_binary(calendar:system_time_to_rfc3339(Ms, [{unit, millisecond},
                                                        {offset, "Z"}])).

%%%%%%%%%%%%
%%% SORT %%%
%%%%%%%%%%%%

%% @doc The rows in the order `Sort' says, largest first: `requests' (the
%% default), `wall' (a request's time from start to end), `other' (time in
%% no tier), a tier's name (its time as the report's `time' option says,
%% self or inclusive), each by its mean or, as `{Column, Stat}', by `p50',
%% `p90', `p99', `p999', `max', `min' or `count'; `identity' in term order.
%% Ties go by identity. `{error, {bad_option, sort, Sort}}' for a column
%% the report does not have. The text's time line says the order.
-spec sort(report(), sort()) -> {ok, report()} | {error, {bad_option, sort, term()}}.
sort(Report, requests) ->
    {ok, Report};
sort(R = #{rows := Rows, tiers := Tiers, time := Time}, Sort) ->
    case sort_key(Sort, Tiers, Time) of
        {ok, identity} ->
            {ok, R#{rows => lists:sort(fun(#{identity := A}, #{identity := B}) -> A =< B end,
                                       Rows),
                    sorted_by => Sort}};
        {ok, Key} ->
            Keyed = [{Key(Row), Row} || Row <- Rows],
            Sorted = lists:sort(fun({KA, #{identity := IA}}, {KB, #{identity := IB}}) ->
                                        {KB, IA} =< {KA, IB}
                                end, Keyed),
            {ok, R#{rows => [Row || {_, Row} <- Sorted], sorted_by => Sort}};
        error ->
            {error, {bad_option, sort, Sort}}
    end.

%% @doc Whether `S' is a statistic a report's times have.
-spec is_stat(term()) -> boolean().
is_stat(S) -> lists:member(S, [mean, p50, p90, p99, p999, max, min, count]).

-spec sort_key(term(), [atom()], self | inclusive) ->
          {ok, identity | fun((row()) -> number())} | error.
sort_key(identity, _Tiers, _Time) ->
    {ok, identity};
sort_key(Col, Tiers, Time) when is_atom(Col) ->
    sort_key({Col, mean}, Tiers, Time);
sort_key({Col, Stat}, Tiers, Time) ->
    case is_stat(Stat) of
        false -> error;
        true when Col =:= wall; Col =:= other ->
            {ok, fun(Row) -> maps:get(Stat, maps:get(Col, Row)) end};
        true ->
            case lists:member(Col, Tiers) of
                true ->
                    {ok, fun(#{tiers := TS}) ->
                                 [T] = [T || T = #{tier := Name} <- TS, Name =:= Col],
                                 maps:get(Stat, maps:get(Time, T))
                         end};
                false ->
                    error
            end
    end;
sort_key(_, _Tiers, _Time) ->
    error.
