%%% @doc What tiered profiling costs a busy node (`make bench-tiers').
%%%
%%% A synthetic three-tier service: every request is a new process (the
%%% http tier, `HTTP_US' of CPU) that calls a db gen_server (`DB_US') and
%%% then a template gen_server (`TPL_US'); four request identities. An
%%% open-loop generator offers a fixed rate (5000 req/s) for a few seconds
%%% in each mode, one mode after the other, the modes interleaved over
%%% the rounds:
%%%
%%% <ul>
%%% <li>`untraced': kprof runs, no tiers (kprof:request/2 is a
%%%     persistent_term read);</li>
%%% <li>`tiers, NIF ring': every request traced, by the kprof_tracer NIF
%%%     (the default tracer);</li>
%%% <li>`tiers, sample 0.1, NIF ring': `sample => 0.1';</li>
%%% <li>`tiers, port tracer': every request traced, each event sent to the
%%%     sink's port (the tracer kprof used before the NIF);</li>
%%% <li>`calls, NIF ring': no tiers, a `kprof:calls/2' session on the three
%%%     tier functions for the whole mode (one ring record per call, the
%%%     sink counting them per function).</li>
%%% </ul>
%%%
%%% The closed loop (`cost/1') measures each mode's cost per request and per
%%% trace event (the sink's `trace_events' per request), calls beside the
%%% tiers.
%%%
%%% Per mode: achieved req/s (requests / time from the first scheduled
%%% start to the last end), loss against untraced, latency of a request
%%% from its process's start to its end, trace bytes per request (the
%%% sink's `bytes' delta / requests offered), the sink's CPU
%%% (`/proc/<os_pid>/stat' utime + stime of the sink process) and the VM's,
%%% each as % of one core (the VM runs with `+sbwt none': its CPU time is
%%% work, not schedulers spinning). Prints a table and rewrites the "Tiers" section
%%% of bench/RESULTS.md. Not a test: nothing fails on a number.
-module(tiers_bench).
-behaviour(gen_server).

-type mode() :: untraced | {tiers, float(), ring | port} | {calls, ring}.

-export([main/1]).
%% For tiers_parts (make bench-tiers-parts)
-export([start_service/0, drive/3, request_fun/0, sink_cpu/0, vm_cpu/0, pct/2, median/1,
         work/1]).
%% Tier functions
-export([http/1, db_query/1, tpl_render/1, bare/1, bare_db/1, bare_tpl/1]).
%% gen_server callbacks
-export([init/1, handle_call/3, handle_cast/2]).

-define(HTTP_US, 10).
-define(DB_US, 20).
-define(TPL_US, 15).
-define(IDENTITIES, 4).
-define(TIERS, [{http, [{?MODULE, http, 1}]}, {db, [{?MODULE, db_query, 1}]},
                {templating, [{?MODULE, tpl_render, 1}]}]).
%% The same functions for kprof:calls/2, and the closed loop's.
-define(CALLS, [{?MODULE, http, 1}, {?MODULE, db_query, 1}, {?MODULE, tpl_render, 1}]).
-define(BARE, [{?MODULE, bare, 1}, {?MODULE, bare_db, 1}, {?MODULE, bare_tpl, 1}]).

%%%%%%%%%%%%
%%% MAIN %%%
%%%%%%%%%%%%

%% @doc `main([Rate, Seconds, Rounds, ResultsFile])', all strings (from
%% the Makefile).
-spec main([string()]) -> no_return().
main([Rate0, Seconds0, Rounds0, Results]) ->
    Rate = list_to_integer(Rate0),
    Seconds = list_to_integer(Seconds0),
    Rounds = list_to_integer(Rounds0),
    logger:set_handler_config(default, level, error),
    ok = kprof:start(),
    ok = start_service(),
    Load = overhead_bench:load_average(),
    io:format("tiers bench: ~b req/s offered, ~b s per mode, ~b round(s); load average ~s~n",
              [Rate, Seconds, Rounds, Load]),
    _ = drive(Rate, 1, request_fun()),                   % warm-up
    Modes = [untraced, {tiers, 1.0, ring}, {tiers, 0.1, ring}, {tiers, 1.0, port}, {calls, ring}],
    Runs0 = [{Round, M, run(M, Rate, Seconds)} || Round <- lists:seq(1, Rounds), M <- Modes],
    Runs = [{M, ratios(R, [B || {Round1, untraced, B} <- Runs0, Round1 =:= Round])}
            || {Round, M, R} <- Runs0],
    Rows = [summary(M, [R || {M1, R} <- Runs, M1 =:= M], Rate) || M <- Modes],
    Base = maps:get(achieved, hd(Rows)),
    Cost = [{M, cost(M)} || M <- Modes],
    Table = [table(Rows, Base), "\n", cost_lines(Cost)],
    io:put_chars(Table),
    Section = section(Table, Rows, Rate, Seconds, Rounds, {Load, overhead_bench:load_average()}),
    ok = write_section(Results, Section),
    io:format("tiers bench: wrote the \"Tiers\" section of ~s~n", [Results]),
    halt(0).

%%%%%%%%%%%%%%%%%%%%%%
%%% TIER FUNCTIONS %%%
%%%%%%%%%%%%%%%%%%%%%%

%% @doc The service's two servers, and the rate of the work loop measured.
-spec start_service() -> ok.
start_service() ->
    calibrate(),
    {ok, _} = gen_server:start({local, bench_db}, ?MODULE, [], []),
    {ok, _} = gen_server:start({local, bench_tpl}, ?MODULE, [], []),
    ok.

%% @doc The http tier: some work, a query, a render.
-spec http(non_neg_integer()) -> term().
http(Id) ->
    burn(?HTTP_US),
    Rows = gen_server:call(bench_db, {query, Id}),
    gen_server:call(bench_tpl, {render, Rows}).

%% @doc The db tier, in the db server.
-spec db_query(term()) -> [term()].
db_query(Id) ->
    burn(?DB_US),
    [Id, Id].

%% @doc The templating tier, in the template server.
-spec tpl_render([term()]) -> binary().
tpl_render(Rows) ->
    burn(?TPL_US),
    term_to_binary(Rows).

%% @doc The three tiers with no work, in one process: what tracing adds
%% to a request by itself.
-spec bare(term()) -> term().
bare(Id) ->
    ?MODULE:bare_tpl(?MODULE:bare_db(Id)).

%% @doc The db tier of {@link bare/1}.
-spec bare_db(term()) -> [term()].
bare_db(Id) -> [Id].

%% @doc The templating tier of {@link bare/1}.
-spec bare_tpl([term()]) -> [term()].
bare_tpl(Rows) -> Rows.

%% @private
-spec init([]) -> {ok, #{}}.
init([]) -> {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({query, Id}, _From, S) -> {reply, db_query(Id), S};
handle_call({render, Rows}, _From, S) -> {reply, tpl_render(Rows), S}.

%% @private
-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

%% Us microseconds of work: the same loop count whatever the load (the
%% loop's rate on this machine measured by calibrate/0 in CPU time, its
%% fastest of five). A loop on the clock (this bench's before) ended early when the
%% OS took the core away, so its CPU per request moved with the load, and
%% its clock reads contended on the VM's time lock, which perf then showed
%% as the largest cost of every mode.
-spec burn(non_neg_integer()) -> ok.
burn(Us) ->
    loop(Us * persistent_term:get({?MODULE, loops_per_us})).

-spec loop(non_neg_integer()) -> ok.
loop(0) -> ok;
loop(N) -> loop(N - 1).

%% @doc The tier functions' work on (the calibrated loop) or off (none: what
%% a request costs with no work of its own, its messages and tracing).
-spec work(boolean()) -> ok.
work(true) ->
    persistent_term:put({?MODULE, loops_per_us}, persistent_term:get({?MODULE, calibrated}));
work(false) ->
    persistent_term:put({?MODULE, loops_per_us}, 0).

-spec calibrate() -> ok.
calibrate() ->
    N = 50000000,
    Ms = lists:min([begin
                        {_, _} = erlang:statistics(runtime),
                        loop(N),
                        element(2, erlang:statistics(runtime))
                    end || _ <- lists:seq(1, 5)]),
    persistent_term:put({?MODULE, calibrated}, max(1, N div max(1, 1000 * Ms))),
    work(true).

%%%%%%%%%%%%%%%%%%%
%%% ONE MODE %%%%%%
%%%%%%%%%%%%%%%%%%%

-spec run(mode(), pos_integer(), pos_integer()) -> map().
run(Mode, Rate, Seconds) ->
    Session = case Mode of
                  untraced -> undefined;
                  {tiers, Sample, Tracer} ->
                      ok = application:set_env(kprof, tracer, Tracer),
                      ok = kprof:start_tiers(?TIERS, #{sample => Sample}),
                      undefined;
                  {calls, ring} ->
                      %% A session longer than the drive (its wait for the
                      %% last requests included); its end waited for below.
                      ok = application:set_env(kprof, tracer, ring),
                      calls_session(?CALLS, #{ms => Seconds * 1000 + 2000, max => infinity})
              end,
    S0 = kprof:sink_stats(),
    Sink0 = sink_cpu(),
    Vm0 = vm_cpu(),
    Run = drive(Rate, Seconds, request_fun()),
    Sink1 = sink_cpu(),
    Vm1 = vm_cpu(),
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    {synced, _} = kprof_sink:command(sync, 60000),   % a loaded machine: the port tracer's backlog
    S1 = kprof:sink_stats(),
    Report = case Mode of
                 untraced ->
                     undefined;
                 {calls, _} ->
                     {ok, Rows} = calls_result(Session),
                     #{calls => Rows};
                 _ ->
                     {ok, R} = kprof:report(#{format => term}),
                     ok = kprof:stop_tiers(),
                     R
             end,
    Run#{bytes => maps:get(bytes, S1) - maps:get(bytes, S0)
             + maps:get(ring_bytes, S1) - maps:get(ring_bytes, S0),
         events => maps:get(trace_events, S1) - maps:get(trace_events, S0),
         sink_cpu => Sink1 - Sink0, vm_cpu => Vm1 - Vm0, report => Report}.

%% @doc How a request runs: `kprof:request(Id, Fun)'.
-spec request_fun() -> fun((term(), fun(() -> term())) -> term()).
request_fun() ->
    fun kprof:request/2.

%% @doc Offers `Rate' requests a second for `Seconds', open loop: request I is
%% due at T0 + I / Rate whatever happened to the ones before it. The
%% generator wakes every millisecond and spawns what is due; each request
%% is `Request(Id, fun() -> http(Id) end)' in a process of its own.
%% `latencies' sorted, in ns.
-spec drive(pos_integer(), pos_integer(), fun((term(), fun(() -> term())) -> term())) -> map().
drive(Rate, Seconds, Request) ->
    N = Rate * Seconds,
    Tab = ets:new(bench_latency, [public, {write_concurrency, true}]),
    T0 = now_ns() + 1000000,
    generate(0, N, T0, 1.0e9 / Rate, {Tab, Request}),
    wait_all(Tab, N, now_ns() + 60000000000),
    Samples = ets:tab2list(Tab),
    ets:delete(Tab),
    Lat = lists:sort([L || {_, L, _} <- Samples]),
    LastEnd = lists:max([E || {_, _, E} <- Samples]),
    Wall = (LastEnd - T0) / 1.0e9,
    #{requests => N, wall_s => Wall, achieved => N / Wall, latencies => Lat}.

-type sink() :: {ets:tid(), fun((term(), fun(() -> term())) -> term())}.

-spec generate(non_neg_integer(), pos_integer(), integer(), float(), sink()) -> ok.
generate(I, N, _T0, _Interval, _To) when I >= N ->
    ok;
generate(I, N, T0, Interval, To) ->
    Due = min(N, trunc((now_ns() - T0) / Interval) + 1),
    spawn_requests(I, Due, To),
    receive after 1 -> ok end,
    generate(max(I, Due), N, T0, Interval, To).

-spec spawn_requests(non_neg_integer(), non_neg_integer(), sink()) -> ok.
spawn_requests(I, Due, _To) when I >= Due ->
    ok;
spawn_requests(I, Due, To) ->
    _ = spawn(fun() -> request(I, To) end),
    spawn_requests(I + 1, Due, To).

-spec request(non_neg_integer(), sink()) -> true.
request(I, {Tab, Request}) ->
    Start = now_ns(),
    Id = {page, I rem ?IDENTITIES},
    _ = Request(Id, fun() -> ?MODULE:http(Id) end),
    End = now_ns(),
    ets:insert(Tab, {I, End - Start, End}).

-spec wait_all(ets:tid(), pos_integer(), integer()) -> ok.
wait_all(Tab, N, Deadline) ->
    case ets:info(Tab, size) >= N orelse now_ns() > Deadline of
        true -> ok;
        false -> timer:sleep(5), wait_all(Tab, N, Deadline)
    end.

-spec now_ns() -> integer().
now_ns() ->
    erlang:monotonic_time(nanosecond).

%% Closed loop, one process, no work in the tiers: microseconds of
%% elapsed time per request, the best of five runs of 5000 (the sink
%% catches up between runs: one process in a loop makes ~150,000 events a
%% second, more than a loaded 2-core machine's sink keeps up with for
%% long).
-spec cost(mode()) -> {float(), float()}.
cost(Mode) ->
    case Mode of
        {tiers, Sample, Tracer} ->
            ok = application:set_env(kprof, tracer, Tracer),
            ok = kprof:start_tiers([{http, [{?MODULE, bare, 1}]}, {db, [{?MODULE, bare_db, 1}]},
                                    {templating, [{?MODULE, bare_tpl, 1}]}],
                                   #{sample => Sample});
        {calls, ring} ->
            ok = application:set_env(kprof, tracer, ring);
        untraced ->
            ok
    end,
    N = 5000,
    Once = fun() ->
                   %% calls: a session per run, ended by its max, the run's
                   %% 3 calls per request.
                   Session = case Mode of
                                 {calls, _} -> calls_session(?BARE, #{max => 3 * N, ms => 600000});
                                 _ -> undefined
                             end,
                   #{trace_events := E0} = kprof:sink_stats(),
                   {Us, _} = timer:tc(fun() ->
                                              [kprof:request(page, fun() -> ?MODULE:bare(I) end)
                                               || I <- lists:seq(1, N)]
                                      end),
                   _ = Session =/= undefined andalso calls_result(Session),
                   {synced, _} = kprof_sink:command(sync, 60000),
                   #{trace_events := E1} = kprof:sink_stats(),
                   {Us, E1 - E0}
           end,
    {Best, Events} = lists:min([Once() || _ <- lists:seq(1, 5)]),
    case Mode of
        {tiers, _, _} -> ok = kprof:stop_tiers();
        _ -> ok
    end,
    {Best / N, Events / N}.

%% A kprof:calls/2 session in a process of its own, its flags on when this
%% returns (this process is traced: kprof_calls leaves out only kprof's own).
-spec calls_session([mfa()], map()) -> pid().
calls_session(Specs, Opts) ->
    Self = self(),
    P = spawn(fun() -> Self ! {calls_done, self(), kprof:calls(Specs, Opts#{print => false})} end),
    wait_traced(200000),
    P.

-spec wait_traced(non_neg_integer()) -> ok.
wait_traced(0) ->
    error(calls_session_not_tracing);
wait_traced(N) ->
    {flags, F} = erlang:trace_info(self(), flags),
    case lists:member(call, F) of
        true -> ok;
        false -> timer:sleep(1), wait_traced(N - 1)
    end.

-spec calls_result(pid()) -> {ok, list()}.
calls_result(P) ->
    receive {calls_done, P, R} -> {ok, _} = R after 600000 -> error(calls_timeout) end.

-spec cost_lines([{term(), {float(), float()}}]) -> iolist().
cost_lines(Cost) ->
    [{untraced, {Base, _}} | _] = Cost,
    ["Closed loop, one process, three tiers doing nothing (what tracing adds to a request, "
     "and per trace event the sink counted):\n",
     [io_lib:format("- ~s: ~.2f us per request (+~.2f us)~s~n",
                    [mode_name(M), Us, Us - Base,
                     case Events > 0 of
                         true -> io_lib:format(", ~.2f events per request, +~b ns per event",
                                               [Events, round(1000 * (Us - Base) / Events)]);
                         false -> ""
                     end])
      || {M, {Us, Events}} <- Cost]].

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% CPU TIME FROM /proc %%%%%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% utime + stime of an OS process, in seconds.
-spec proc_cpu(integer() | string()) -> float().
proc_cpu(OsPid) ->
    {ok, Stat} = file:read_file("/proc/" ++ to_list(OsPid) ++ "/stat"),
    [_, Rest] = string:split(Stat, ")", trailing),
    Fields = string:lexemes(Rest, " "),
    %% Rest starts at field 3 (state); utime and stime are fields 14 and 15.
    UTime = binary_to_integer(lists:nth(14 - 2, Fields)),
    STime = binary_to_integer(lists:nth(15 - 2, Fields)),
    (UTime + STime) / clock_ticks().

-spec sink_cpu() -> float().
sink_cpu() ->
    #{os_pid := OsPid} = kprof_sink:info(),
    proc_cpu(OsPid).

-spec vm_cpu() -> float().
vm_cpu() ->
    proc_cpu(os:getpid()).

-spec clock_ticks() -> pos_integer().
clock_ticks() ->
    case string:to_integer(os:cmd("getconf CLK_TCK")) of
        {N, _} when is_integer(N), N > 0 -> N;
        _ -> 100
    end.

-spec to_list(integer() | string()) -> string().
to_list(I) when is_integer(I) -> integer_to_list(I);
to_list(S) -> S.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% SUMMARY AND RESULTS.md %%%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

-spec summary(term(), [map()], pos_integer()) -> map().
summary(Mode, Runs, Rate) ->
    Sum = fun(K) -> lists:sum([maps:get(K, R) || R <- Runs]) end,
    Lat = lists:sort(lists:append([maps:get(latencies, R) || R <- Runs])),
    Wall = Sum(wall_s),
    Requests = Sum(requests),
    Reports = [R || #{report := R} <- Runs, is_map(R), not is_map_key(calls, R)],
    CallRows = lists:append([Rows || #{report := #{calls := Rows}} <- Runs]),
    Calls = [{MFA, lists:sum([C || #{mfa := M1, calls := C} <- CallRows, M1 =:= MFA])}
             || MFA <- lists:usort([M1 || #{mfa := M1} <- CallRows])],
    #{mode => Mode, offered => Rate,
      achieved => Requests / Wall,
      lat_mean => lists:sum(Lat) / length(Lat) / 1.0e6,
      lat_p50 => median([P || #{p50 := P} <- Runs]) / 1.0e6,
      lat_p99 => median([P || #{p99 := P} <- Runs]) / 1.0e6,
      p50_ratio => median([P || #{p50_ratio := P} <- Runs]),
      p99_ratio => median([P || #{p99_ratio := P} <- Runs]),
      bytes_per_req => Sum(bytes) / Requests,
      events_per_req => Sum(events) / Requests,
      sink_cpu => 100 * Sum(sink_cpu) / Wall,
      vm_cpu => 100 * Sum(vm_cpu) / Wall,
      sink_us_per_req => 1.0e6 * Sum(sink_cpu) / Requests,
      vm_us_per_req => 1.0e6 * Sum(vm_cpu) / Requests,
      recorded => lists:sum([maps:get(requests, R) || R <- Reports]),
      tiers => tier_means(Reports),
      calls => Calls}.

%% A run's p50 and p99, and their ratios to the untraced run of its round.
-spec ratios(map(), [map()]) -> map().
ratios(R = #{latencies := Lat}, [#{latencies := Base}]) ->
    P50 = pct(Lat, 0.5), P99 = pct(Lat, 0.99),
    R#{p50 => P50, p99 => P99, p50_ratio => P50 / pct(Base, 0.5),
       p99_ratio => P99 / pct(Base, 0.99)}.

%% @doc The median of a list of numbers (the lower one of the middle two).
-spec median([number()]) -> number().
median(L) ->
    lists:nth((length(L) + 1) div 2, lists:sort(L)).

%% @doc The `Q' quantile of a sorted list.
-spec pct([number()], float()) -> number().
pct(Sorted, Q) ->
    lists:nth(max(1, round(Q * length(Sorted))), Sorted).

%% The mean self time of each tier over every recorded request, in us.
-spec tier_means([map()]) -> [{atom(), float()}].
tier_means([]) ->
    [];
tier_means(Reports) ->
    Alls = [A || #{all := A} <- Reports],
    Names = [T || #{tier := T} <- maps:get(tiers, hd(Alls))],
    [{Name, weighted([{C, M} || #{tiers := Ts} <- Alls,
                                #{tier := T, self := #{count := C, mean := M}} <- Ts,
                                T =:= Name])}
     || Name <- Names] ++
        [{other, weighted([{C, M} || #{other := #{count := C, mean := M}} <- Alls])}].

-spec weighted([{non_neg_integer(), float()}]) -> float().
weighted(CountMeans) ->
    case lists:sum([C || {C, _} <- CountMeans]) of
        0 -> 0.0;
        N -> 1000 * lists:sum([C * M || {C, M} <- CountMeans]) / N
    end.

-spec mode_name(term()) -> string().
mode_name(untraced) -> "untraced";
mode_name({tiers, 1.0, T}) -> "tiers, " ++ tracer_name(T);
mode_name({calls, T}) -> "calls, " ++ tracer_name(T);
mode_name({tiers, S, T}) ->
    "tiers, sample " ++ float_to_list(S, [{decimals, 3}, compact]) ++ ", " ++ tracer_name(T).

tracer_name(ring) -> "NIF ring";
tracer_name(port) -> "port tracer".

-spec table([map()], float()) -> iolist().
table(Rows, Base) ->
    Head = "| mode | offered/s | achieved/s | loss % | latency p50 ms | p99 ms | p50 / untraced "
           "| p99 / untraced | mean ms | trace bytes/req | events/req | VM CPU us/req "
           "| sink CPU us/req | VM CPU % | sink CPU % |\n"
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    [Head |
     [io_lib:format("| ~s | ~b | ~.1f | ~s | ~.3f | ~.3f | ~.3f | ~.3f | ~.3f | ~.1f | ~.2f "
                    "| ~.1f | ~.1f | ~.1f | ~.1f |~n",
                    [mode_name(M), Offered, Achieved, loss(M, Achieved, Base), P50, P99, R50, R99,
                     Mean, Bytes, Events, VmUs, SinkUs, VmCpu, SinkCpu])
      || #{mode := M, offered := Offered, achieved := Achieved, lat_mean := Mean,
           lat_p50 := P50, lat_p99 := P99, p50_ratio := R50, p99_ratio := R99,
           bytes_per_req := Bytes, events_per_req := Events,
           sink_cpu := SinkCpu, vm_cpu := VmCpu, sink_us_per_req := SinkUs,
           vm_us_per_req := VmUs} <- Rows]].

-spec loss(term(), float(), float()) -> string().
loss(untraced, _, _) -> "-";
loss(_, Achieved, Base) -> lists:flatten(io_lib:format("~.2f", [100 * (Base - Achieved) / Base])).

-spec section(iolist(), [map()], pos_integer(), pos_integer(), pos_integer(),
              {string(), string()}) -> iolist().
section(Table, Rows, Rate, Seconds, Rounds, {Load0, Load1}) ->
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    Traced = [R || #{mode := {tiers, _, _}} = R <- Rows],
    Counted = [R || #{mode := {calls, _}} = R <- Rows],
    ["## Tiers\n\n",
     io_lib:format("`make bench-tiers` on ~4..0b-~2..0b-~2..0b ~2..0b:~2..0b UTC; ~b cores, ~s; "
                   "OTP ~s (erts ~s); nice ~b; load average before / after the run: ~s / ~s.~n~n",
                   [Y, Mo, D, H, Mi, erlang:system_info(logical_processors_available),
                    cpu_model(), erlang:system_info(otp_release), erlang:system_info(version),
                    niceness(), Load0, Load1]),
     io_lib:format("A synthetic three-tier service (bench/tiers_bench.erl): each request is a new "
                   "process, the http tier (~b us of CPU), which calls a db gen_server (~b us) "
                   "then a template gen_server (~b us); ~b identities. Offered ~b req/s open loop, "
                   "~b s per mode, ~b round(s), the modes interleaved. Latency: from the request "
                   "process's start to its end; p50 and p99: medians of the rounds' own, and "
                   "the medians of each round's ratio to its untraced run. The work is a "
                   "loop whose count was measured at start (the same instructions whatever "
                   "the load). Loss: (untraced - traced) / untraced achieved "
                   "req/s. Trace bytes and events: the sink's counters per request offered. CPU: "
                   "utime + stime of the VM and of the sink process, per request offered and as "
                   "% of one core over the mode's wall time. The machine is shared: the load "
                   "average says how much else ran.~n~n",
                   [?HTTP_US, ?DB_US, ?TPL_US, ?IDENTITIES, Rate, Seconds, Rounds]),
     Table, "\n",
     "Tracers: `NIF ring' is the default (the kprof_tracer NIF writes a record per event into "
     "shared memory the sink reads); `port tracer' sends each event to the sink's port "
     "(application env {tracer, port}). The tier times the sink measured (below) include the "
     "tracing itself, done in the traced process inside the span it times; the db and template "
     "servers are one process each. A request `sample' leaves out still pays part: every "
     "process carries the trace flags, and at each call of a tier function the VM asks the "
     "tracer NIF twice (enabled/3) before it runs the match spec that finds no token "
     "(erts's erl_trace.c, erts_call_trace).\n\n",
     [io_lib:format("- ~s: ~b requests recorded by the sink; mean self time per tier: ~s~n",
                    [mode_name(M), Recorded,
                     lists:join(", ", [io_lib:format("~s ~.1f us", [T, Us]) || {T, Us} <- Tiers])])
      || #{mode := M, recorded := Recorded, tiers := Tiers} <- Traced],
     [io_lib:format("- ~s: ~s calls counted by the sink (~s)~n",
                    [mode_name(M), integer_to_list(lists:sum([C || {_, C} <- Calls])),
                     lists:join(", ", [io_lib:format("~s ~b", [F, C]) || {{_, F, _}, C} <- Calls])])
      || #{mode := M, calls := Calls} <- Counted],
     "\n"].

%% The VM's nice value (field 19 of /proc/self/stat).
-spec niceness() -> integer().
niceness() ->
    {ok, Stat} = file:read_file("/proc/self/stat"),
    [_, Rest] = string:split(Stat, ")", trailing),
    binary_to_integer(lists:nth(19 - 2, string:lexemes(Rest, " "))).

-spec cpu_model() -> string().
cpu_model() ->
    case file:read_file("/proc/cpuinfo") of
        {ok, Info} ->
            case re:run(Info, "model name\\s*: ([^\\n]*)", [{capture, all_but_first, list}]) of
                {match, [Model]} -> Model;
                nomatch -> "?"
            end;
        _ -> "?"
    end.

%% Replaces the "## Tiers" section (up to the next "## " heading) or
%% appends it; the rest of the file stays.
-spec write_section(string(), iolist()) -> ok.
write_section(File, Section) ->
    New = unicode:characters_to_binary(Section),
    Old = case file:read_file(File) of
              {ok, B} -> B;
              {error, enoent} -> <<"# kprof benchmark results\n\n">>
          end,
    Lines = string:split(Old, "\n", all),
    {Before, Rest} = lists:splitwith(fun(L) -> L =/= <<"## Tiers">> end, Lines),
    After = case Rest of
                [] -> [];
                [_ | Tail] -> lists:dropwhile(fun(L) -> not is_heading(L) end, Tail)
            end,
    Head = string:trim(lists:join("\n", Before), trailing),
    Out = case After of
              [] -> [Head, "\n\n", New];
              _ -> [Head, "\n\n", New, lists:join("\n", After)]
          end,
    file:write_file(File, Out).

-spec is_heading(binary()) -> boolean().
is_heading(<<"## ", _/binary>>) -> true;
is_heading(_) -> false.
