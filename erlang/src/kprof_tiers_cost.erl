%%% @doc What the tiers' tracing costs this node while it runs, and the
%%% `max_overhead' option that keeps it under a bound.
%%%
%%% The cost has two parts. The VM's: every trace event runs the VM's trace
%%% code and kprof's tracer in the traced process. It is the events the sink
%%% counts times the cost of one event, which {@link calibrate/1} measures at
%%% the start of the tiers on this node with their own tracer (the NIF's
%%% ring, or the sink's port), flags and match spec: a loop of calls of a
%%% traced function against the same loop untraced, in a fresh process,
%%% short rounds interleaved, (fastest traced - fastest untraced) / events,
%%% kept for a minute. The sink's: its own CPU time (utime + stime of its OS
%%% process, /proc). Both as a share of the CPU the node spends (the VM's
%%% and the sink's), over the last polls of the tiers server (one a second):
%%% {@link info/1}, which `kprof:status()' and the report show.
%%%
%%% The calibration's loop is cache-hot: a service's events cost more each
%%% (the trace code's cache lines, a lock word moving between cores);
%%% bench/RESULTS.md ("Tiers: where the time goes") has both figures for
%%% the same node, so the VM's part here is a lower bound. Events the
%%% tracer discards before they are built (a `link' of the `procs' flag)
%%% are not counted. The request markers' records, which the request path
%%% writes without a trace event (kprof_tracer:mark/3,4), are counted as
%%% events: they cost less than one.
%%%
%%% With `max_overhead' (a fraction, 0.02 for 2 %), each poll whose estimate
%%% is above it lowers the fraction of {@link kprof:request/2} and {@link
%%% kprof:set_token/1} calls traced (`sample') in proportion, and each poll
%%% whose estimate is below half of it raises the fraction back (doubling
%%% it, up to the `sample' given). The fraction in force is in the
%%% counters the request path reads (no global GC: the persistent term is
%%% not rewritten). Requests an `entry' MFA opens are not sampled (as with
%%% `sample' itself), so it cannot lower those.
-module(kprof_tiers_cost).

-include("kprof_tiers.hrl").

-export([calibrate/1, new/3, update/3, info/1, next_ppm/4]).
%% The calibration's functions: remote calls, traced and not.
-export([step/1, plain/1]).

-export_type([cost/0]).

%% Short rounds, many: the fastest of each kind is one the OS did not
%% interrupt, even on a loaded machine. Through the port, a tenth of the
%% calls: every event is a message the sink's port queues, and a backlog of
%% tens of thousands drains in seconds (tiers_start waits behind it).
-define(N(Kind), case Kind of ring -> 1000; port -> 100 end).
-define(ROUNDS, 21).
-define(CAL_TIMEOUT_MS, 10000).
-define(MAX_AGE_MS, 60000).
-define(KEY(Kind), {?MODULE, Kind}).
-define(PPM, 1000000).
%% Polls the estimate spans (one a second): the newest reading against the
%% oldest kept.
-define(READINGS, 10).
%% Seconds of readings before max_overhead acts, and after each change.
-define(SETTLE_S, 3).
%% /proc/PID/stat's times are in USER_HZ, 100 on Linux's architectures.
-define(USER_HZ, 100).

-type reading() :: {integer(), undefined | number(), undefined | number(), non_neg_integer()}.
-opaque cost() :: #{per_event_ns := undefined | non_neg_integer(),
                    max_overhead := undefined | number(),
                    user_ppm := pos_integer(),
                    counters := counters:counters_ref(),
                    sink_os_pid := undefined | integer(),
                    readings := [reading()],
                    info := map()}.

%%% Calibration

%% @doc The cost of one event (ns) in a process traced by `Tracer' with the
%% tiers' flags and match spec: kept for a minute per kind of tracer, else
%% measured now (42,000 events through the ring, 4,200 through the port). `#{per_event_ns => undefined}' when it
%% could not be measured (another tracer holds new processes, ...).
-spec calibrate({tracer, port()} | {tracer, module(), term()}) -> map().
calibrate(Tracer) ->
    Kind = case Tracer of
               {tracer, Port} when is_port(Port) -> port;
               _ -> ring
           end,
    Now = erlang:monotonic_time(millisecond),
    case persistent_term:get(?KEY(Kind), undefined) of
        #{at := At} = Kept when Now - At =< ?MAX_AGE_MS ->
            Kept;
        _ ->
            Measured = measure(Tracer, flags(Kind), ?N(Kind)),
            %% Through the port, the events queue on it: drained before the
            %% start goes on, or the guard's commands at arming (its lag
            %% bound, the clock) would meet a busy port and be dropped.
            _ = Kind =:= port andalso kprof_sink:command(sync, ?CAL_TIMEOUT_MS),
            case Measured of
                #{per_event_ns := Ns} = M when is_integer(Ns) ->
                    persistent_term:put(?KEY(Kind), M#{at => Now}),
                    M#{at => Now};
                M ->
                    M
            end
    end.

%% The tiers' flags for a call and its return_to (a port needs the VM's time).
-spec flags(ring | port) -> [atom()].
flags(ring) -> [call, arity, return_to];
flags(port) -> [call, arity, return_to, monotonic_timestamp].

-spec measure(tuple(), [atom()], pos_integer()) -> map().
measure(Tracer, Flags, N) ->
    %% The tier match spec without its guard (no token: the sink takes a
    %% call without a label for nobody's, and reads these before tiers_start).
    MS = [{'_', [], [{message, {{{get_seq_token}, {caller}}}}]}],
    Self = self(),
    P = spawn(fun() -> receive go -> Self ! {calibrated, self(), rounds(N)} end end),
    try
        1 = erlang:trace_pattern({?MODULE, step, 1}, MS, [local]),
        1 = erlang:trace(P, true, [Tracer | Flags]),
        P ! go,
        receive
            {calibrated, P, Rounds} ->
                Plain = lists:min([U || {U, _} <- Rounds]),
                Traced = lists:min([T || {_, T} <- Rounds]),
                #{per_event_ns => max(0, (Traced - Plain) div (2 * N)),
                  rounds => Rounds, events => 2 * N * ?ROUNDS}
        after ?CAL_TIMEOUT_MS ->
                #{per_event_ns => undefined, reason => timeout}
        end
    catch
        _:Why -> #{per_event_ns => undefined, reason => Why}
    after
        _ = try erlang:trace_pattern({?MODULE, step, 1}, false, [local]) catch _:_ -> 0 end,
        exit(P, kill)
    end.

%% [{UntracedNs, TracedNs}], interleaved.
-spec rounds(pos_integer()) -> [{integer(), integer()}].
rounds(N) ->
    [{time(plain, N), time(step, N)} || _ <- lists:seq(1, ?ROUNDS)].

-spec time(plain | step, pos_integer()) -> integer().
time(F, N) ->
    T0 = erlang:monotonic_time(nanosecond),
    loop(F, N),
    erlang:monotonic_time(nanosecond) - T0.

-spec loop(plain | step, non_neg_integer()) -> ok.
loop(_, 0) -> ok;
loop(plain, N) -> _ = ?MODULE:plain(N), loop(plain, N - 1);
loop(step, N) -> _ = ?MODULE:step(N), loop(step, N - 1).

%% @private The calibration's traced function (a call and a return_to).
-spec step(term()) -> term().
step(X) -> X.

%% @private The same, never traced.
-spec plain(term()) -> term().
plain(X) -> X.

%%% The estimate, poll by poll

%% @doc The estimate of a start: its calibration, the `max_overhead' and
%% `sample' of its plan, the request counters (the fraction in force is
%% written there), and the sink's stats at start.
-spec new(#plan{}, map(), counters:counters_ref()) -> cost().
new(#plan{sample = Sample, max_overhead = Max}, Calibration, C) ->
    UserPpm = max(1, round(Sample * ?PPM)),
    counters:put(C, ?SAMPLE_PPM, UserPpm),
    OsPid = try maps:get(os_pid, kprof_sink:info(), undefined) catch _:_ -> undefined end,
    Cost = #{per_event_ns => maps:get(per_event_ns, Calibration, undefined),
             max_overhead => Max, user_ppm => UserPpm, counters => C, sink_os_pid => OsPid,
             readings => [], info => #{}},
    Cost#{info := summary(Cost, undefined)}.

%% @doc One poll's reading: the sink's event count `Events' now. Returns the
%% estimate, with the sampled fraction changed when `max_overhead' says so.
-spec update(non_neg_integer(), cost(), boolean()) -> cost().
update(Events, Cost = #{readings := Rs}, Active) ->
    R = {erlang:monotonic_time(nanosecond), vm_cpu_s(), sink_cpu_s(Cost), Events},
    Readings = lists:sublist([R | Rs], ?READINGS),
    Share = share(Readings, maps:get(per_event_ns, Cost)),
    Cost1 = case Active of
                true -> control(Share, Cost#{readings := Readings});
                false -> Cost#{readings := Readings}
            end,
    Cost1#{info := summary(Cost1, Share)}.

%% @doc What `kprof:status()' and the report show: `per_event_ns' (the
%% calibration), `events_per_s', `vm_cpu' and `sink_cpu' (tracing's CPU,
%% in cores: 0.05 is 5 % of one core), `share' (of the CPU the VM and the
%% sink spent: `undefined' until two polls), `sample' (the fraction in
%% force), `max_overhead', `lowered' (the fraction is below the one given).
-spec info(cost() | undefined) -> map() | undefined.
info(undefined) -> undefined;
info(#{info := Info}) -> Info.

-spec summary(cost(), undefined | map()) -> map().
summary(#{per_event_ns := Ns, max_overhead := Max, user_ppm := User, counters := C}, Share) ->
    Ppm = counters:get(C, ?SAMPLE_PPM),
    Base = #{per_event_ns => Ns, max_overhead => Max, sample => Ppm / ?PPM,
             lowered => Ppm < User, share => undefined, vm_cpu => undefined,
             sink_cpu => undefined, events_per_s => undefined},
    case Share of
        undefined -> Base;
        _ -> maps:merge(Base, Share)
    end.

%% Over the readings kept: events a second, tracing's CPU (cores) and its
%% share of the VM's and the sink's.
-spec share([reading()], undefined | non_neg_integer()) -> undefined | map().
share([{T1, Vm1, Sink1, E1} | Older = [_ | _]], Ns) ->
    {T0, Vm0, Sink0, E0} = lists:last(Older),
    Secs = (T1 - T0) / 1.0e9,
    Events = max(0, E1 - E0),
    VmTrace = case Ns of
                  undefined -> undefined;
                  _ -> Events * Ns / 1.0e9
              end,
    SinkCpu = diff(Sink1, Sink0),
    Node = case {diff(Vm1, Vm0), SinkCpu} of
               {undefined, _} -> undefined;
               {V, undefined} -> V;
               {V, S} -> V + S
           end,
    Traced = case {VmTrace, SinkCpu} of
                 {undefined, _} -> undefined;
                 {V1, undefined} -> V1;
                 {V1, S1} -> V1 + S1
             end,
    case Secs > 0 of
        true ->
            #{events_per_s => Events / Secs, span_s => Secs,
              vm_cpu => per_s(VmTrace, Secs), sink_cpu => per_s(SinkCpu, Secs),
              share => case {Traced, Node} of
                           {undefined, _} -> undefined;
                           {_, undefined} -> undefined;
                           {_, N} when N =< 0 -> 0.0;
                           {Tr, N} -> min(1.0, Tr / N)
                       end};
        false ->
            undefined
    end;
share(_, _) ->
    undefined.

diff(undefined, _) -> undefined;
diff(_, undefined) -> undefined;
diff(A, B) -> max(0, A - B).

per_s(undefined, _) -> undefined;
per_s(X, Secs) -> X / Secs.

%% max_overhead, once the readings span ?SETTLE_S: next_ppm/4; the readings
%% start again after each change, so the next decision sees the new
%% fraction's cost.
-spec control(undefined | map(), cost()) -> cost().
control(#{share := Share, span_s := Span}, Cost = #{max_overhead := Max, user_ppm := User,
                                                    counters := C, readings := Rs})
  when is_number(Max), is_number(Share), Span >= ?SETTLE_S ->
    Ppm = counters:get(C, ?SAMPLE_PPM),
    case next_ppm(Share, Max, Ppm, User) of
        Ppm ->
            Cost;
        New ->
            counters:put(C, ?SAMPLE_PPM, New),
            Cost#{readings := [hd(Rs)]}
    end;
control(_, Cost) ->
    Cost.

%% @doc The fraction to trace next (millionths), from the share measured
%% at fraction `Ppm', the bound `Max' and the fraction given, `User':
%% lowered in proportion (a tenth more, to land under the bound) while the
%% share is above the bound, doubled back (up to `User') while it is below
%% half of it, else kept; never below one millionth.
-spec next_ppm(number(), number(), pos_integer(), pos_integer()) -> pos_integer().
next_ppm(Share, Max, Ppm, _User) when Share > Max ->
    max(1, trunc(Ppm * 0.9 * Max / Share));
next_ppm(Share, Max, Ppm, User) when Share < Max / 2, Ppm < User ->
    min(User, 2 * Ppm);
next_ppm(_Share, _Max, Ppm, _User) ->
    Ppm.

%% The VM's CPU time (s): /proc on Linux (utime + stime), else the VM's own
%% count (user time only).
-spec vm_cpu_s() -> number().
vm_cpu_s() ->
    case proc_cpu_s(os:getpid()) of
        undefined -> element(1, erlang:statistics(runtime)) / 1000;
        S -> S
    end.

-spec sink_cpu_s(cost()) -> undefined | number().
sink_cpu_s(#{sink_os_pid := undefined}) -> undefined;
sink_cpu_s(#{sink_os_pid := P}) -> proc_cpu_s(integer_to_list(P)).

%% utime + stime of an OS process, in seconds; undefined without /proc.
-spec proc_cpu_s(string()) -> undefined | number().
proc_cpu_s(OsPid) ->
    case file:read_file("/proc/" ++ OsPid ++ "/stat") of
        {ok, Stat} ->
            %% After the command's closing parenthesis: field 3 (state) on;
            %% utime and stime are fields 14 and 15.
            [_, Rest] = string:split(Stat, ")", trailing),
            Fields = string:lexemes(Rest, " "),
            try (binary_to_integer(lists:nth(12, Fields))
                 + binary_to_integer(lists:nth(13, Fields))) / ?USER_HZ
            catch _:_ -> undefined
            end;
        _ ->
            undefined
    end.
