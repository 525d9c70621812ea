%%% @doc Tiered request profiling on a toy shop: three tiers, two request
%%% kinds, a report.
%%%
%%% ```
%%% $ make
%%% $ erl -noshell -pa erlang/ebin -pa _build/examples/ebin -eval 'tiers_shop:run(), halt().'
%%% '''
%%% Each page request runs in its own process (as a web server's handler
%%% would), queries the `shop_db' server and renders in the `shop_tpl'
%%% server; the time each server spends is its tier's, not the caller's.
-module(tiers_shop).
-behaviour(gen_server).

-export([run/0]).
%% Tier functions
-export([page/1, query/1, render/1]).
%% gen_server
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc Start the shop, profile 200 requests, print the report.
-spec run() -> ok.
run() ->
    ok = kprof:start(),
    {ok, _} = gen_server:start({local, shop_db}, ?MODULE, [], []),
    {ok, _} = gen_server:start({local, shop_tpl}, ?MODULE, [], []),
    ok = kprof:start_tiers([{http, [{?MODULE, page, 1}]},
                            {database, [{?MODULE, query, 1}]},
                            {templating, [{?MODULE, render, 1}]}],
                           #{slow_ms => 8, slow_max => 3}),
    Self = self(),
    %% One request every 2 ms: a steady load, not a burst (in a burst the
    %% time a request waits in shop_db's queue is its http tier's).
    Pids = [begin
                timer:sleep(2),
                spawn(fun() ->
                              Kind = case I rem 4 of 0 -> {orders, list}; _ -> {users, get} end,
                              kprof:request(Kind, fun() -> ?MODULE:page(Kind) end),
                              Self ! {done, self()}
                      end)
            end || I <- lists:seq(1, 200)],
    [receive {done, P} -> ok end || P <- Pids],
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    ok = kprof:report(),
    ok = kprof:stop_tiers(),
    kprof:stop().

%% @doc The http tier: parse, query, render.
-spec page({atom(), atom()}) -> binary().
page(Kind) ->
    work(200),
    Rows = gen_server:call(shop_db, {query, Kind}),
    gen_server:call(shop_tpl, {render, Rows}).

%% @doc The database tier (in shop_db): orders are slow.
-spec query({atom(), atom()}) -> [integer()].
query({orders, _}) -> work(3000), lists:seq(1, 50);
query(_) -> work(500), [1].

%% @doc The templating tier (in shop_tpl).
-spec render([integer()]) -> binary().
render(Rows) ->
    work(100 * length(Rows) div 5 + 100),
    term_to_binary(Rows).

%% @private
-spec init([]) -> {ok, #{}}.
init([]) -> {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({query, Kind}, _From, S) -> {reply, ?MODULE:query(Kind), S};
handle_call({render, Rows}, _From, S) -> {reply, ?MODULE:render(Rows), S}.

%% @private
-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

%% Busy for `Us' microseconds.
-spec work(non_neg_integer()) -> ok.
work(Us) ->
    T = erlang:monotonic_time(microsecond) + Us,
    spin(T).

-spec spin(integer()) -> ok.
spin(T) ->
    case erlang:monotonic_time(microsecond) >= T of
        true -> ok;
        false -> spin(T)
    end.
