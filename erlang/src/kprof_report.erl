%%% @doc The tier report: sink reports merged (window slices, nodes),
%%% then a map, a text table or JSON. It only merges and formats the data it
%%% is given: the nodes' reports are fetched by {@link kprof_tiers_cluster}.
%%%
%%% The sink's report (doc/tiers.md) has one row per request identity,
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
%%%   full_trace => undefined | Full}          % option full_trace of start_tiers
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
%%% refused at its tables' caps (doc/protocol.md), since start or reset.
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

-export([empty_raw/1, merge_raw/4, build/2, build/3, text/2, json/1, format_ms/1]).
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
%% The sink's report (doc/tiers.md, "The report"), times in ns.
-type raw() :: #{atom() => term()}.
-type raw_row() :: #{identity := term(), requests := non_neg_integer(),
                     tiers := [#{calls := non_neg_integer(), atom() => kprof_hist:hist()}],
                     other := kprof_hist:hist(), wall := kprof_hist:hist()}.

%% The statistics of a tier column the report always has (the text shows
%% them), whatever the sink's `stats' add.
-define(TIME_STATS, #{self => ns, inclusive => ns}).
-define(SUMS, [requests, events, abandoned, killed_requests, truncated, dropped_requests,
               dropped_events, orphan_events, folded_requests]).
-define(ID_WIDTH, 40).
-define(VAL_WIDTH, 7).
-define(TEXT_LIMIT, 50).
%% Functions per identity in the text's full-trace tables.
-define(FULL_TEXT_TOP, 10).
%% The sink's drops per table, as the node reports count them.
-define(TABLE_DROPS, [sink_dropped_pids, sink_dropped_mfas, sink_dropped_names]).
%% Events the tracer NIF's ring lost, as the node reports count them: the
%% ring full, not encodable (an identity too big), of a pid the sink's table
%% refused, records the sink could not take (a table full, malformed).
-define(RING_DROPS, [ring_drops, ring_unsupported, ring_unresolved, ring_bad]).

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
%% statistics the sink has (include/ks_tiers.h's KS_TIER_STATS).
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
                                         (I = maps:get(incomplete, R, false)) =/= false],
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
                                     (F = maps:get(full_trace, R, undefined)) =/= undefined])},
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

%%%%%%%%%%%%
%%% TEXT %%%
%%%%%%%%%%%%

%% @doc The report as a table (iodata): a header line, the tiers with
%% `mean' and `p99' (self or inclusive time, option `time'), `other',
%% the `all' row, then at most `limit' (50) identities, most requests
%% first, and the slowest requests.
-spec text(report(), map()) -> iolist().
text(R = #{tiers := Tiers, all := All, rows := Rows}, Opts) ->
    Time = maps:get(time, Opts, maps:get(time, R)),
    Limit = maps:get(limit, Opts, ?TEXT_LIMIT),
    Shown = case Limit of
                infinity -> Rows;
                _ -> lists:sublist(Rows, Limit)
            end,
    Lines = [{"all", All} | [{identity_text(Id), Row} || #{identity := Id} = Row <- Shown]],
    IdW = max(12, lists:max([string:length(L) || {L, _} <- Lines])),
    ReqW = max(4, lists:max([length(integer_to_list(N)) || {_, #{requests := N}} <- Lines])),
    Widths = [max(2 * ?VAL_WIDTH, length(atom_to_list(T)) + 1) || T <- Tiers],
    Head1 = [pad("identity", IdW), "  ", pad("reqs", ReqW), "  ",
             [pad(atom_to_list(T), W) || {T, W} <- lists:zip(Tiers, Widths)], "other"],
    Head2 = [lists:duplicate(IdW + ReqW + 4, $\s),
             [[pad("mean", W - ?VAL_WIDTH), pad("p99", ?VAL_WIDTH)] || W <- Widths], "mean"],
    Body = [[pad(L, IdW), "  ", lpad(integer_to_list(N), ReqW), "  ",
             [[vpad(format_ms(maps:get(mean, maps:get(Time, TS))), W - ?VAL_WIDTH),
               vpad(format_ms(maps:get(p99, maps:get(Time, TS))), ?VAL_WIDTH)]
              || {TS, W} <- lists:zip(TierStats, Widths)],
             format_ms(maps:get(mean, Other))]
            || {L, #{requests := N, tiers := TierStats, other := Other}} <- Lines],
    More = case length(Rows) - length(Shown) of
               0 -> [];
               K -> [io_lib:format("(~b more identities: option limit)", [K])]
           end,
    Table = [header_line(R)] ++ drop_lines(R) ++ [[time_line(Time), sorted_text(R)], Head1, Head2 | Body]
        ++ More ++ slow_lines(R)
        ++ full_lines(maps:get(full_trace, R, undefined), maps:get(names, Opts, erlang)),
    [[string:trim(Line, trailing), $\n] || Line <- Table].

%% What was counted and lost, under the header's total: each cap's drops
%% (a line only when something was lost), and the trace patterns put back
%% after a code reload. Full trace's drops are in its own section.
-spec drop_lines(report()) -> [iolist()].
drop_lines(R) ->
    Get = fun(K) -> maps:get(K, R, 0) end,
    Tables = [{Get(K), Name} || {K, Name} <- [{sink_dropped_pids, "pids"},
                                              {sink_dropped_mfas, "MFAs"},
                                              {sink_dropped_names, "names"}]],
    Parts = [io_lib:format(Format, [N]) || {N, Format} <-
                 [{Get(dropped_requests), "~b requests (in-flight cap max_inflight)"},
                  {Get(abandoned), "~b requests abandoned (open past max_request_ms)"},
                  {Get(killed_requests), "~b requests killed (their process exited before "
                   "their end; times not recorded)"},
                  {Get(dropped_events), "~b events (max_request_events)"},
                  {Get(sink_dropped), "~b trace messages in the sink"},
                  {Get(ring_drops), "~b events lost in the tracer's ring (full)"},
                  {Get(ring_unsupported), "~b events the tracer could not write to its ring "
                   "(an identity too big for a record, ...)"},
                  {Get(ring_unresolved), "~b ring events of pids the sink's table refused"},
                  {Get(ring_bad), "~b ring records the sink could not take (a table full, "
                   "or malformed)"}], N > 0]
        ++ [["sink tables full, new keys refused: ",
             lists:join(", ", [io_lib:format("~b ~ts", [N, Name]) || {N, Name} <- Tables])]
            || lists:any(fun({N, _}) -> N > 0 end, Tables)],
    [["dropped: ", lists:join("; ", Parts)] || Parts =/= []]
        ++ [io_lib:format("trace patterns put back after code reload: ~b", [Get(reapplied)])
            || Get(reapplied) > 0].

%% Per full-traced identity, its top functions by inclusive time.
-spec full_lines(undefined | map(), kprof_names:style()) -> [iolist()].
full_lines(undefined, _Names) ->
    [];
full_lines(Full = #{identities := Ids, dropped_requests := DR, dropped_events := DE,
                    truncated := Tr}, Names) ->
    DN = maps:get(dropped_nodes, Full, lists:sum([maps:get(dropped_nodes, I, 0) || I <- Ids])),
    Head = io_lib:format("full trace: ~b identities; top functions by inclusive time, ms "
                         "summed over requests (dropped requests ~b, events ~b, call paths ~b; "
                         "truncated ~b)", [length(Ids), DR, DE, DN, Tr]),
    [Head |
     lists:append(
       [[io_lib:format("  ~ts: ~b requests, ~ts ms in all~ts",
                       [identity_text(Id), N, format_ms(Total),
                        case maps:get(dropped_nodes, Ident, 0) of
                            0 -> "";
                            D -> io_lib:format(", ~b call paths dropped (full_trace_max_nodes)",
                                               [D])
                        end]),
         io_lib:format("    ~ts~ts~ts  function", [lpad("calls", 9), lpad("incl", 9),
                                                    lpad("self", 9)])
         | [io_lib:format("    ~ts~ts~ts  ~ts", [lpad(integer_to_list(C), 9),
                                                  lpad(lists:flatten(format_ms(I)), 9),
                                                  lpad(lists:flatten(format_ms(S)), 9),
                                                  kprof_names:mfa(MFA, Names)])
            || #{mfa := MFA, calls := C, inclusive := I, self := S}
                   <- lists:sublist(Mfas, ?FULL_TEXT_TOP)]]
        || #{identity := Id, requests := N, total := Total, mfas := Mfas} = Ident <- Ids])].


-spec header_line(report()) -> iolist().
header_line(R = #{nodes := Nodes, traced_s := Traced, requests := Requests,
                  seen := Seen, sampled := Sampled, events := Events, dropped := Dropped,
                  inflight := Inflight}) ->
    Window = case maps:get(window_s, R) of
                 undefined -> "";
                 W -> io_lib:format(" (window ~ts s)", [format_num(W)])
             end,
    SeenText = case Seen of
                   0 -> "";
                   _ -> io_lib:format(" (seen ~b, sampled ~b)", [Seen, Sampled])
               end,
    io_lib:format("kprof tiers on ~ts: ~ts s traced~ts, requests ~b recorded~ts, "
                  "~b in flight, events ~b, dropped ~b, ~ts~ts~ts",
                  [lists:join(", ", [atom_to_list(N) || N <- Nodes]), format_num(Traced),
                   Window, Requests, SeenText, Inflight, Events, Dropped, state_text(R),
                   incomplete_text(R), missing_text(R)]).

%% "; INCOMPLETE: ...": a sink that did not answer in time, or died, and
%% what its rows are as of.
-spec incomplete_text(report()) -> iolist().
incomplete_text(R) ->
    OnNode = length(maps:get(nodes, R, [])) > 1,
    case maps:get(incomplete, R, []) of
        [] ->
            [];
        Incomplete ->
            ["; INCOMPLETE: ",
             lists:join("; ", [incomplete_part(I, OnNode) || I <- Incomplete])]
    end.

%% "; MISSING: c@host (noconnection)": the nodes that gave no report.
-spec missing_text(report()) -> iolist().
missing_text(R) ->
    case maps:get(missing, R, []) of
        [] -> [];
        Missing -> ["; MISSING: ",
                    lists:join(", ", [io_lib:format("~ts (~0tp)", [atom_to_list(N), Why])
                                      || {N, Why} <- Missing])]
    end.

-spec incomplete_part(map(), boolean()) -> iolist().
incomplete_part(I = #{node := N}, OnNode) ->
    Where = [[" on ", atom_to_list(N)] || OnNode],
    Polled = maps:get(polled_at, I, undefined),
    case maps:get(reason, I) of
        no_answer ->
            io_lib:format("the sink~ts did not answer within ~ts s: ~ts",
                          [Where, format_secs(maps:get(waited_ms, I, 0)),
                           case Polled of
                               undefined -> "no rows polled yet";
                               _ -> ["rows as of its last poll at ", Polled]
                           end]);
        _ ->
            io_lib:format("the sink~ts died at ~ts: ~ts",
                          [Where, maps:get(at, I, <<"?">>),
                           case Polled of
                               undefined -> "every row it held is lost (no poll before)";
                               _ -> ["the events it read after its last poll at ", Polled,
                                     " are lost"]
                           end])
    end.

%% "tracing ABORTED: overload (lag 1.8 s > 1.0 s) at 2026-...Z": what
%% tripped, the measured figure and the bound; the node too when the tiers
%% run on several.
-spec state_text(report()) -> iolist().
state_text(R = #{aborted := [_ | _] = Aborted}) ->
    OnNode = length(maps:get(nodes, R, [])) > 1,
    ["tracing ABORTED: ",
     lists:join("; ", [[maps:get(message, A, io_lib:format("~0tp", [Reason])),
                        [[" on ", atom_to_list(N)] || OnNode], " at ", T]
                       || #{node := N, reason := Reason, time := T} = A <- Aborted])];
state_text(#{active := true}) ->
    "tracing on";
state_text(_) ->
    "tracing stopped".

-spec time_line(self | inclusive) -> string().
%% "; sorted by ...", when the rows are not in the default order.
-spec sorted_text(report()) -> iolist().
sorted_text(#{sorted_by := {Col, Stat}}) -> io_lib:format("; sorted by ~ts ~ts", [Col, Stat]);
sorted_text(#{sorted_by := Col}) -> io_lib:format("; sorted by ~ts", [Col]);
sorted_text(_) -> [].

time_line(self) ->
    "times in ms; per tier its self time (time in its own code); other: time in no tier";
time_line(inclusive) ->
    "times in ms; per tier its inclusive time (a frame of it open); other: time in no tier".

-spec slow_lines(report()) -> [iolist()].
slow_lines(#{slow := []}) ->
    [];
slow_lines(#{slow := Slow}) ->
    ["slowest requests (wall ms, identity, pid, start, self ms per tier):" |
     [io_lib:format("  ~ts  ~ts  ~0p  ~ts ~ts  other ~ts",
                    [format_ms(Wall), identity_text(Id), Pid, Start,
                     [[" ", atom_to_list(T), " ", format_ms(S)] || #{tier := T, self := S} <- Tiers],
                     format_ms(Other)])
      || #{wall := Wall, identity := Id, pid := Pid, start := Start, tiers := Tiers,
           other := Other} <- Slow]].

%% @doc Milliseconds with three significant digits: `0.412', `1.90',
%% `12.3', `1234'.
-spec format_ms(number()) -> string().
format_ms(X) when X == 0 -> "0";
format_ms(X) when X >= 99.95 -> integer_to_list(round(X));
format_ms(X) when X >= 9.995 -> io_lib:format("~.1f", [float(X)]);
format_ms(X) when X >= 0.9995 -> io_lib:format("~.2f", [float(X)]);
format_ms(X) -> io_lib:format("~.3f", [float(X)]).

-spec format_secs(non_neg_integer()) -> string().
format_secs(Ms) when Ms rem 1000 =:= 0 -> integer_to_list(Ms div 1000);
format_secs(Ms) -> format_num(Ms / 1000).

-spec format_num(number()) -> string().
format_num(X) when is_integer(X) -> integer_to_list(X);
format_num(X) -> lists:flatten(format_ms(X)).

-spec identity_text(term()) -> string().
identity_text(Id) ->
    Text = lists:flatten(io_lib:format("~0tp", [Id])),
    case string:length(Text) > ?ID_WIDTH of
        true -> string:slice(Text, 0, ?ID_WIDTH - 3) ++ "...";
        false -> Text
    end.

%% Left-aligned in W columns (callers leave room for a space).
-spec pad(string(), non_neg_integer()) -> iolist().
pad(S, W) ->
    [S, lists:duplicate(max(0, W - string:length(S)), $\s)].

%% A value: left-aligned, and at least one space after it.
-spec vpad(string(), non_neg_integer()) -> iolist().
vpad(S, W) ->
    [S, lists:duplicate(max(1, W - string:length(S)), $\s)].

-spec lpad(string(), non_neg_integer()) -> iolist().
lpad(S, W) ->
    [lists:duplicate(max(0, W - length(S)), $\s), S].

%%%%%%%%%%%%
%%% JSON %%%
%%%%%%%%%%%%

%% @doc The report as JSON (a UTF-8 binary). Identities, pids and other
%% terms JSON has no type for become their `~0p' text; atoms and binaries
%% strings.
-spec json(report()) -> binary().
json(Report) ->
    Rows = [json_row(R) || R <- maps:get(rows, Report)],
    Slow = [S#{identity => json_identity(Id)} || #{identity := Id} = S <- maps:get(slow, Report)],
    Aborted = [A#{reason => text(Reason), info => text(Info)}
               || #{reason := Reason, info := Info} = A <- maps:get(aborted, Report)],
    Missing = [#{node => N, reason => text(Why)} || {N, Why} <- maps:get(missing, Report, [])],
    unicode:characters_to_binary(
      encode(Report#{rows => Rows, slow => Slow, aborted => Aborted, missing => Missing,
                     all => json_row(maps:get(all, Report))})).

-spec json_row(row()) -> map().
json_row(Row = #{identity := Id}) ->
    Row#{identity => json_identity(Id)}.

-spec json_identity(term()) -> binary() | atom().
json_identity(Id) when is_binary(Id); is_atom(Id) -> Id;
json_identity(Id) -> text(Id).

-spec text(term()) -> binary().
text(Term) ->
    unicode:characters_to_binary(io_lib:format("~0tp", [Term])).

-spec encode(term()) -> iolist().
encode(M) when is_map(M) ->
    [${, lists:join($,, [[string(key(K)), $:, encode(V)]
                         || {K, V} <- lists:sort(maps:to_list(M))]), $}];
encode(L) when is_list(L) ->
    [$[, lists:join($,, [encode(V) || V <- L]), $]];
encode(true) -> "true";
encode(false) -> "false";
encode(null) -> "null";
encode(undefined) -> "null";
encode(A) when is_atom(A) -> string(atom_to_binary(A));
encode(B) when is_binary(B) -> string(B);
encode(I) when is_integer(I) -> integer_to_binary(I);
encode(F) when is_float(F) -> float_to_binary(F, [short]);
encode(T) -> string(text(T)).

-spec key(term()) -> binary().
key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_binary(K) -> K;
key(K) -> text(K).

-spec string(binary()) -> iolist().
string(B) ->
    case unicode:characters_to_list(B) of
        Chars when is_list(Chars) -> [$", [escape(C) || C <- Chars], $"];
        _ -> string(text(B))     % not UTF-8: its ~p text
    end.

-spec escape(char()) -> iodata().
escape($") -> "\\\"";
escape($\\) -> "\\\\";
escape($\n) -> "\\n";
escape($\r) -> "\\r";
escape($\t) -> "\\t";
escape(C) when C < 16#20 -> io_lib:format("\\u~4.16.0b", [C]);
escape(C) -> <<C/utf8>>.
