%%% @doc The workload of the tier tests: tier functions that sleep or burn
%%% known amounts of time, nest, recurse, raise, or return big terms, and a
%%% gen_server to run them in another process. Loaded on peer nodes too.
%%%
%%% Each tier function also measures the time of its own work (the sleep or
%%% the burn) and adds it up, per function, in a public ETS table
%%% ({@link start_times/0}): on a loaded machine a 5 ms sleep may take 9,
%%% and the tests compare what the sink says with what really happened as
%%% well as with what was asked.
-module(kprof_tiers_work).
-behaviour(gen_server).

%% Tier functions
-export([sleep_a/1, sleep_b/1, burn_a/1, outer/2, inner/1, body_rec/2, tail_rec/2,
         catcher/2, thrower/1, big/1, small/1, entry/2, entry3/3, nest/1]).
%% Several processes
-export([start_server/1, stop_server/1, via/3, http/3, db/2, tpl/1]).
%% Helpers of the tests
-export([run_requests/3, run_mfa_requests/5, flood/0, settle/0, burn/1, burn_until/1,
         start_times/0, stop_times/1, reset_times/0, measured_ms/2, setup/0, cleanup/1]).

-define(TIMES, kprof_tiers_work_times).
%% gen_server callbacks
-export([init/1, handle_call/3, handle_cast/2]).

%%% Tier functions

%% @doc Sleeps `Ms' (one tier).
-spec sleep_a(non_neg_integer()) -> ok.
sleep_a(Ms) -> timed(sleep_a, fun() -> timer:sleep(Ms) end).

%% @doc Sleeps `Ms' (another tier).
-spec sleep_b(non_neg_integer()) -> ok.
sleep_b(Ms) -> timed(sleep_b, fun() -> timer:sleep(Ms) end).

%% @doc Burns `Us' microseconds (a tier).
-spec burn_a(non_neg_integer()) -> ok.
burn_a(Us) -> timed(burn_a, fun() -> burn(Us) end).

%% @doc Keeps a scheduler busy for `Us' microseconds.
-spec burn(non_neg_integer()) -> ok.
burn(Us) ->
    burn_until(erlang:monotonic_time(microsecond) + Us).

%% @doc Spins until the monotonic clock reaches `T' (microseconds).
-spec burn_until(integer()) -> ok.
burn_until(T) ->
    case erlang:monotonic_time(microsecond) >= T of
        true -> ok;
        false -> burn_until(T)
    end.

%% @doc Sleeps `OuterMs', then calls {@link inner/1}: a tier within a tier.
-spec outer(non_neg_integer(), non_neg_integer()) -> ok.
outer(OuterMs, InnerMs) ->
    timed(outer, fun() -> timer:sleep(OuterMs) end),
    ok = ?MODULE:inner(InnerMs),
    ok.

%% @doc Sleeps `Ms'.
-spec inner(non_neg_integer()) -> ok.
inner(Ms) -> timed(inner, fun() -> timer:sleep(Ms) end).

%% @doc Burns `Us' microseconds `N + 1' times, recursing in body position.
-spec body_rec(non_neg_integer(), non_neg_integer()) -> non_neg_integer().
body_rec(0, Us) ->
    timed(body_rec, fun() -> burn(Us) end),
    0;
body_rec(N, Us) ->
    timed(body_rec, fun() -> burn(Us) end),
    1 + body_rec(N - 1, Us).

%% @doc Burns `Us' microseconds `N + 1' times, recursing in tail position.
-spec tail_rec(non_neg_integer(), non_neg_integer()) -> ok.
tail_rec(0, Us) ->
    timed(tail_rec, fun() -> burn(Us) end);
tail_rec(N, Us) ->
    timed(tail_rec, fun() -> burn(Us) end),
    tail_rec(N - 1, Us).

%% @doc Calls {@link thrower/1}, catches its throw, then sleeps `Ms'.
-spec catcher(non_neg_integer(), non_neg_integer()) -> caught.
catcher(Ms, ThrowerMs) ->
    try ?MODULE:thrower(ThrowerMs) of
        _ -> error(not_thrown)
    catch
        throw:thrown -> timed(catcher, fun() -> timer:sleep(Ms) end), caught
    end.

%% @doc Sleeps `Ms', then throws `thrown' from two calls deep.
-spec thrower(non_neg_integer()) -> no_return().
thrower(Ms) ->
    timed(thrower, fun() -> timer:sleep(Ms) end),
    deeper(),
    error(unreachable).

-spec deeper() -> no_return().
deeper() ->
    throw(thrown).

%% @doc A request within this function: sleeps `Ms' in {@link sleep_b/1}
%% as the request `inner'.
-spec nest(non_neg_integer()) -> ok.
nest(Ms) ->
    kprof:request(inner, fun() -> ?MODULE:sleep_b(Ms) end).

%% @doc A fresh binary of `Bytes' bytes.
-spec big(non_neg_integer()) -> binary().
big(Bytes) ->
    binary:copy(<<0>>, Bytes).

%% @doc A small term.
-spec small(non_neg_integer()) -> ok.
small(_) -> ok.

%% @doc An entry point: sleeps `Ms'.
-spec entry(term(), non_neg_integer()) -> ok.
entry(_Id, Ms) ->
    timed(entry, fun() -> timer:sleep(Ms) end).

%% @doc An entry point of arity 3: sleeps `Ms'.
-spec entry3(term(), term(), non_neg_integer()) -> ok.
entry3(_A, _B, Ms) ->
    timer:sleep(Ms).

%%% Several processes: http (the caller) -> db server -> tpl server

%% @doc A gen_server, registered as `Name', that applies what it is asked.
-spec start_server(atom()) -> pid().
start_server(Name) ->
    {ok, Pid} = gen_server:start({local, Name}, ?MODULE, [], []),
    Pid.

%% @doc Stops a server of {@link start_server/1}.
-spec stop_server(atom()) -> ok.
stop_server(Name) ->
    gen_server:stop(Name).

%% @doc `apply(M, F, A)' in the server `Name'.
-spec via(atom(), atom(), list()) -> term().
via(Name, F, Args) ->
    gen_server:call(Name, {apply, ?MODULE, F, Args}).

%% @doc The http tier: sleeps `Ms', then asks the db server.
-spec http(non_neg_integer(), non_neg_integer(), non_neg_integer()) -> term().
http(Ms, DbMs, TplMs) ->
    timed(http, fun() -> timer:sleep(Ms) end),
    via(kprof_tiers_db, db, [DbMs, TplMs]).

%% @doc The db tier, in the db server: sleeps `Ms', then asks the tpl
%% server.
-spec db(non_neg_integer(), non_neg_integer()) -> term().
db(Ms, TplMs) ->
    timed(db, fun() -> timer:sleep(Ms) end),
    via(kprof_tiers_tpl, tpl, [TplMs]).

%% @doc The templating tier, in the tpl server: sleeps `Ms'.
-spec tpl(non_neg_integer()) -> rendered.
tpl(Ms) ->
    timed(tpl, fun() -> timer:sleep(Ms) end),
    rendered.

%%% Helpers

%% @doc Requests of `f', 50 at a time, as fast as they go, until told `stop'.
-spec flood() -> ok.
flood() ->
    receive
        stop -> ok
    after 0 ->
        run_requests(50, f, fun() -> sleep_a(0) end),
        flood()
    end.

%% @doc `N' requests of `Identity', each running `Fun'.
-spec run_requests(non_neg_integer(), term(), fun(() -> term())) -> ok.
run_requests(N, Identity, Fun) ->
    lists:foreach(fun(_) -> kprof:request(Identity, Fun) end, lists:seq(1, N)).

%% @doc `N' requests of `Identity', each running `apply(M, F, A)' (for
%% other nodes, where a fun of the test may not be loadable).
-spec run_mfa_requests(non_neg_integer(), term(), module(), atom(), list()) -> ok.
run_mfa_requests(N, Identity, M, F, A) ->
    run_requests(N, Identity, fun() -> apply(M, F, A) end).

%% @doc Wait until every trace message of this node is in the sink's
%% port.
-spec settle() -> ok.
settle() ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after 5000 -> error(trace_delivered) end.

%%% Measured times

%% @doc Create the table of measured times, owned by a process of its own
%% (returned, for {@link stop_times/1}).
-spec start_times() -> pid().
start_times() ->
    Self = self(),
    Pid = spawn(fun() ->
                        _ = ets:new(?TIMES, [named_table, public, {write_concurrency, true}]),
                        Self ! {times, self()},
                        receive stop -> ok end
                end),
    receive {times, Pid} -> Pid end.

%% @doc A tiers test's setup: logs quiet, kprof started, the table of
%% measured times; {@link cleanup/1} takes it all back.
-spec setup() -> pid().
setup() ->
    logger:set_handler_config(default, level, error),
    _ = application:load(kprof),
    ok = kprof_test_util:start(#{}),
    start_times().

%% @doc A tiers test's cleanup: the times, the tiers, an alert subscription,
%% kprof, the tracer's environment, the logs as they were.
-spec cleanup(pid()) -> ok.
cleanup(Times) ->
    ok = stop_times(Times),
    _ = kprof:stop_tiers(),
    _ = kprof:unsubscribe(),
    ok = kprof:stop(),
    [application:unset_env(kprof, K) || K <- [tracer, ring_bytes]],
    logger:set_handler_config(default, level, all).

%% @doc Drop the table of measured times.
-spec stop_times(pid()) -> ok.
stop_times(Pid) ->
    MRef = erlang:monitor(process, Pid),
    Pid ! stop,
    receive {'DOWN', MRef, process, Pid, _} -> ok end.

%% @doc Forget the measured times.
-spec reset_times() -> ok.
reset_times() ->
    true = ets:delete_all_objects(?TIMES),
    ok.

%% @doc The time the work of function `Key' took, per request of `N', in
%% milliseconds.
-spec measured_ms(atom(), pos_integer()) -> float().
measured_ms(Key, N) ->
    case ets:lookup(?TIMES, Key) of
        [{Key, Ns}] -> Ns / N / 1.0e6;
        [] -> 0.0
    end.

-spec timed(atom(), fun(() -> T)) -> T.
timed(Key, Fun) ->
    T0 = erlang:monotonic_time(nanosecond),
    Result = Fun(),
    Ns = erlang:monotonic_time(nanosecond) - T0,
    _ = try ets:update_counter(?TIMES, Key, Ns, {Key, 0}) catch error:badarg -> no_table end,
    Result.

%%% gen_server

%% @private
-spec init([]) -> {ok, #{}}.
init([]) -> {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({apply, M, F, A}, _From, S) -> {reply, apply(M, F, A), S}.

%% @private
-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.
