%%% @doc What a flame capture's files show and what they leave out, as a
%%% map and as text: the capture's summary.
%%%
%%% The sink's call-path tree has a budget in bytes (option `max_bytes'):
%%% call paths past it go to an `OVER_BUDGET' frame under their deepest kept
%%% frame, and frames past a process's stack cap (65,536) to a `TOO_DEEP'
%%% frame, with their time. The summary gives the share of the capture's time
%%% in those frames, and it is printed (to the caller's group leader, as the
%%% top table is) whenever it is not zero, so a cut graph never passes for a
%%% whole one. The top table (`top => N') comes from per-function counters
%%% that no budget touches: it is exact either way.
%%%
%%% Times are corrected for tracing's cost (`correct => true', the default:
%%% the sink takes each event's cost off the time before it, the cost per
%%% kind of event measured in the capture's own intervals, or by
%%% kprof_flame_calib for a kind with too few of them: doc/internals-flame.md);
%%% `correction' says the costs used (`call_ns' for calls and other events,
%%% `return_ns' for return_tos, each `from' the capture or the calibration),
%%% how much came off, and how many call paths were shorter than their
%%% events' cost and counted as 0 (`clamped'): never negative, never hidden.
%%% The top table's header line says it too.
%%%
%%% With `info => true' a capture returns the summary after its files:
%%% ```
%%% #{total_us => 812345,            % the capture's time, every process
%%%   events => 10412345, procs => 3, dropped_procs => 0,
%%%   max_bytes => 1073741824, tree_bytes => 94371840, nodes => 2359296, max_stack => 65536,
%%%   over_budget => #{time_us => 0, share_pct => 0.0, paths => 0, calls => 0},
%%%   too_deep => #{time_us => 0, share_pct => 0.0, calls => 0},
%%%   correction => #{per_event_ns => 489, events => 10374246, subtracted_us => 5015682,
%%%                   clamped => 7, clamped_us => 57325, skipped_ns => 0,
%%%                   call_ns => 571, return_ns => 365,
%%%                   from => #{call => capture, return => capture}, calibration_ns => 420},
%%%   top => [kprof_top:row()], functions => 4012,   % with top => N
%%%   record => #{path => <<"/tmp/c.kprec">>, files => [<<"/tmp/c.kprec">>], bytes => 35311012,
%%%               events => 10412345, cut_events => 0, error => none}, % with record => Path
%%%   replay => #{events => 10412345, truncated => false, error => none}} % kprof:replay/2
%%% '''
-module(kprof_flame_summary).

-export([from_info/2, text/1, print/1, correction_text/1]).

-export_type([summary/0]).

-type correction() :: #{per_event_ns := non_neg_integer(), events := non_neg_integer(),
                        subtracted_us := non_neg_integer(), clamped := non_neg_integer(),
                        clamped_us := non_neg_integer(), skipped_ns := non_neg_integer(),
                        call_ns := non_neg_integer(), return_ns := non_neg_integer(),
                        from := #{call := from(), return := from()},
                        calibration_ns := non_neg_integer()}.
-type from() :: capture | calibration.
-type cut() :: #{time_us := non_neg_integer(), share_pct := float(),
                 calls := non_neg_integer(), paths => non_neg_integer()}.
-type summary() :: #{total_us := non_neg_integer(), events := non_neg_integer(),
                     procs := non_neg_integer(), dropped_procs := non_neg_integer(),
                     max_bytes := non_neg_integer(), tree_bytes := non_neg_integer(),
                     nodes := non_neg_integer(), max_stack := non_neg_integer(),
                     over_budget := cut(), too_deep := cut(), correction := correction(),
                     top => [kprof_top:row()], functions => non_neg_integer(),
                     record => map(), replay => map(),
                     %% a sampling profile's (kprof_sample): how many samples, read, lost
                     sample => map()}.

%% @doc The summary of the sink's `Info' (flame_write's reply) and the top
%% table's rows (`[]' without `top').
-spec from_info(map(), [kprof_top:row()]) -> summary().
from_info(Info, Rows) ->
    Total = maps:get(total_us, Info, 0),
    Get = fun(K) -> maps:get(K, Info, 0) end,
    S = #{total_us => Total, events => Get(events), procs => Get(procs),
          dropped_procs => Get(dropped_procs), max_bytes => Get(max_bytes),
          tree_bytes => Get(tree_bytes), nodes => Get(nodes), max_stack => Get(max_stack),
          over_budget => (cut(Get(over_budget_ns), Total))#{paths => Get(over_budget_paths),
                                                            calls => Get(over_budget_calls)},
          too_deep => (cut(Get(too_deep_ns), Total))#{calls => Get(stack_overflow)},
          correction => #{per_event_ns => Get(correct_per_event_ns), events => Get(corrected),
                          subtracted_us => us(Get(subtracted_ns)), clamped => Get(clamped),
                          clamped_us => us(Get(clamped_ns)), skipped_ns => Get(skipped_ns),
                          call_ns => Get(correct_call_ns), return_ns => Get(correct_return_ns),
                          from => #{call => from(Get(correct_call_measured)),
                                    return => from(Get(correct_return_measured))},
                          calibration_ns => Get(correct_ns)}},
    %% A recording's counts (record => Path) and a replay's (kprof:replay/2), as the sink
    %% gives them.
    S1 = maps:merge(S, maps:with([record, replay], Info)),
    case maps:find(functions, Info) of
        {ok, N} -> S1#{top => Rows, functions => N};
        error -> S1
    end.

%% @doc The lines to print: one per limit that cut the graph, none when the
%% graph is whole.
-spec text(summary()) -> iolist().
text(S = #{over_budget := Over, too_deep := Deep, max_bytes := Max}) ->
    [case Over of
         #{time_us := 0, calls := 0} -> [];
         #{time_us := T, share_pct := P, paths := Paths, calls := Calls} ->
             io_lib:format("kprof flame: ~.1f % of the time (~ts ms) is in OVER_BUDGET frames: "
                           "~b call paths were cut where the graph passed max_bytes (~ts), "
                           "~b calls in or under them; the top table is exact, raise "
                           "max_bytes to see those paths~n",
                           [P, ms(T), Paths, bytes(Max), Calls])
     end,
     case Deep of
         #{time_us := 0, calls := 0} -> [];
         #{time_us := T2, share_pct := P2, calls := Calls2} ->
             io_lib:format("kprof flame: ~.1f % of the time (~ts ms) is in TOO_DEEP frames: "
                           "~b calls went deeper than a process's ~b frames; the top table "
                           "is exact~n", [P2, ms(T2), Calls2, maps:get(max_stack, S)])
     end].

%% @doc One line on the correction for tracing's cost (printed with the top table).
-spec correction_text(summary()) -> iolist().
correction_text(#{correction := #{per_event_ns := 0, skipped_ns := Skipped}}) when Skipped > 0 ->
    io_lib:format("kprof flame: times not corrected for tracing's cost: the capture's whole "
                  "time was less than its events' cost at ~b ns an event~n", [Skipped]);
correction_text(#{correction := #{per_event_ns := 0}}) ->
    io_lib:format("kprof flame: times not corrected for tracing's cost (correct => false)~n", []);
correction_text(#{correction := #{per_event_ns := Ns, events := E, subtracted_us := S,
                                  clamped := C, clamped_us := CU, call_ns := CallNs,
                                  return_ns := RetNs, from := #{call := CallFrom,
                                                                return := RetFrom}}}) ->
    io_lib:format("kprof flame: times corrected for tracing's cost: ~b ns off for each of ~b "
                  "events on average (a call or other event ~b ns, a return_to ~b ns, from "
                  "the ~ts; ~ts ms in all); ~b call paths had less time than their events' "
                  "cost and count as 0 (~ts ms not taken off)~n",
                  [Ns, E, CallNs, RetNs, from_text(CallFrom, RetFrom), ms(S), C, ms(CU)]).

%% @doc {@link text/1} to the calling process's group leader.
-spec print(summary()) -> ok.
print(Summary) ->
    case text(Summary) of
        [[], []] -> ok;
        Text -> io:put_chars(Text)
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec from(non_neg_integer()) -> from().
from(0) -> calibration;
from(_) -> capture.

-spec from_text(from(), from()) -> string().
from_text(capture, capture) -> "capture's own intervals";
from_text(calibration, calibration) -> "calibration";
from_text(capture, calibration) -> "capture's intervals, return_tos' from the calibration";
from_text(calibration, capture) -> "capture's intervals, calls' from the calibration".

-spec cut(non_neg_integer(), non_neg_integer()) -> cut().
cut(Ns, TotalUs) ->
    #{time_us => us(Ns), share_pct => pct(Ns, TotalUs), calls => 0}.

-spec us(non_neg_integer()) -> non_neg_integer().
us(Ns) -> (Ns + 500) div 1000.

-spec pct(non_neg_integer(), non_neg_integer()) -> float().
pct(_Ns, 0) -> 0.0;
pct(Ns, TotalUs) -> round(Ns * 10 / TotalUs) / 100.

-spec ms(non_neg_integer()) -> string().
ms(Us) -> float_to_list(Us / 1000, [{decimals, 3}]).

-spec bytes(non_neg_integer()) -> string().
bytes(B) when B >= 1 bsl 30, B rem (1 bsl 30) =:= 0 -> integer_to_list(B bsr 30) ++ " GiB";
bytes(B) when B >= 1 bsl 20, B rem (1 bsl 20) =:= 0 -> integer_to_list(B bsr 20) ++ " MiB";
bytes(B) -> integer_to_list(B) ++ " bytes".
