%%% @doc The shop's supervisor: the database pool's workers, then the
%%% mochiweb server (one_for_all: the server does not run without its
%%% pool).
-module(shop_sup).
-behaviour(supervisor).

-export([start_link/1, init/1]).

%% @doc Start the supervisor, registered as `shop_sup'.
-spec start_link(#{backend := shop_db:backend(), pool_size := pos_integer(),
                   port := inet:port_number(), loop := plain | kprof_tiers_mochiweb}) ->
          {ok, pid()} | {error, term()}.
start_link(Cfg) ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, Cfg).

%% @private
-spec init(map()) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init(#{backend := Backend, pool_size := Size, port := Port, loop := Loop}) ->
    Workers = [#{id => {shop_db, N}, start => {shop_db, start_link, [Backend, N]}}
               || N <- lists:seq(1, Size)],
    Web = #{id => shop_web, start => {shop_web, start_link, [Port, Loop]}},
    {ok, {#{strategy => one_for_all, intensity => 3, period => 10}, Workers ++ [Web]}}.
