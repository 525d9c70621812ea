%%% @doc The example shop (examples/shop) under kprof tiers, end to end:
%%% real HTTP over loopback to mochiweb, queries to SQLite through the
%%% pool's gen_server workers, pages from bbmustache. 200 requests per
%%% route, then the report must show each tier where the route uses it,
%%% and the database owning the time of GET /report.
%%%
%%% The shop's modules are compiled from examples/shop/src into
%%% _build/shop/ebin when they are not on the code path (`make eunit'
%%% does not build them). The database is smaller than the demo's (5,000
%%% orders) so that 200 reports take a few seconds. With
%%% `KPROF_SHOP_PG_PORT' set (examples/shop/pg.sh start), the same test
%%% runs on PostgreSQL too.
-module(kprof_shop_tests).

-include_lib("eunit/include/eunit.hrl").

-import(kprof_test_report, [report/0, row/2, calls/2, self_mean/2]).

-define(ROUTES, [{"/", {"GET", "/"}},
                 {"/users/:id", {"GET", "/users/:id"}},
                 {"/report", {"GET", "/report"}},
                 {"/catalog", {"GET", "/catalog"}}]).
-define(N, 200).

-spec shop_test_() -> term().
shop_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     [{timeout, 60, {"200 requests per route: three tiers, database time owns /report",
                     fun sqlite/0}},
      {timeout, 30, {"the kprof_tiers_mochiweb loop instead of an entry function",
                     fun mochiweb_helper/0}}]
     ++ [{timeout, 60, {"the same on PostgreSQL", ?_test(tiers({postgres, #{port => P}}))}}
         || P <- pg_port()]}.

-spec sqlite() -> term().
sqlite() ->
    tiers(sqlite).

-spec tiers(sqlite | {postgres, map()}) -> term().
tiers(Db) ->
    {ok, Started} = shop:start(#{orders => 5000, db => Db}),
    #{port := Port} = Started,
    DbFile = maps:get(db_file, Started, none),
    try
        ?assert(Db =/= sqlite orelse filelib:is_regular(DbFile)),
        ok = kprof:start_tiers(shop_demo:tiers(), shop_demo:tier_opts()),
        [?assertEqual([{200, ?N}], drive(Port, Path)) || {Path, _} <- ?ROUTES],
        R = report(),
        ?assertEqual([http, database, templating], maps:get(tiers, R)),
        ?assertEqual(0, maps:get(dropped, R)),
        ?assertEqual(lists:sort([{Id, ?N} || {_, Id} <- ?ROUTES]),
                     lists:sort([{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, R)])),
        %% Every route runs a handler and renders a page; all but / query.
        [begin
             Row = row(R, Id),
             ?assert(calls(Row, http) >= ?N),
             ?assert(self_mean(Row, http) > 0),
             ?assert(calls(Row, templating) >= ?N),
             ?assert(self_mean(Row, templating) > 0),
             case Id of
                 {_, "/"} ->
                     ?assertEqual(0, calls(Row, database)),
                     ?assertEqual(0.0, float(self_mean(Row, database)));
                 _ ->
                     ?assert(calls(Row, database) >= ?N),
                     ?assert(self_mean(Row, database) > 0)
             end
         end || {_, Id} <- ?ROUTES],
        %% The report's time is the database's: more than the other tiers
        %% together, and most of the request.
        Report = row(R, {"GET", "/report"}),
        DbMs = self_mean(Report, database),
        ?assert(DbMs > self_mean(Report, http) + self_mean(Report, templating)),
        ?assert(DbMs > 0.5 * wall_ms(Report)),
        %% The catalog renders a big page: more templating than /users/:id.
        ?assert(self_mean(row(R, {"GET", "/catalog"}), templating)
                > self_mean(row(R, {"GET", "/users/:id"}), templating))
    after
        _ = kprof:stop_tiers(),
        ok = shop:stop()
    end,
    ?assertEqual(undefined, whereis(shop_sup)),
    ?assertNot(filelib:is_regular(DbFile)).

-spec pg_port() -> [inet:port_number()].
pg_port() ->
    case os:getenv("KPROF_SHOP_PG_PORT") of
        false -> [];
        P -> [list_to_integer(P)]
    end.

-spec mochiweb_helper() -> term().
mochiweb_helper() ->
    {ok, #{port := Port}} = shop:start(#{orders => 1000, loop => kprof_tiers_mochiweb}),
    try
        ok = kprof:start_tiers([{http, [{shop_web, '_', '_'}, {shop_http, '_', '_'}]},
                                {database, [{shop_db, '_', '_'}]},
                                {templating, [{shop_tpl, '_', '_'}]}], #{}),
        [{200, _} = shop_load:get(Port, "/users/" ++ integer_to_list(I))
         || I <- lists:seq(1, 20)],
        {404, _} = shop_load:get(Port, "/nowhere"),
        R = report(),
        Row = row(R, {"GET", "/users/:id"}),
        ?assertEqual(20, maps:get(requests, Row)),
        ?assert(self_mean(Row, database) > 0),
        %% No template: the path's shape, not the text the client chose.
        ?assertEqual(1, maps:get(requests, row(R, {"GET", "/*"})))
    after
        _ = kprof:stop_tiers(),
        ok = shop:stop()
    end.

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

-spec setup() -> ok.
setup() ->
    ok = ensure_shop(),
    logger:set_handler_config(default, level, emergency),
    ok = kprof_test_util:start(#{}),
    ok.

-spec cleanup(ok) -> ok.
cleanup(_) ->
    _ = kprof:stop_tiers(),
    _ = shop:stop(),
    ok = kprof:stop(),
    logger:set_handler_config(default, level, all),
    ok.

%% ?N GETs of Path (":id" a random user) from 4 clients, each waiting for
%% its answer before the next: [{Status, Count}].
-spec drive(inet:port_number(), string()) -> [{term(), pos_integer()}].
drive(Port, Pattern) ->
    Self = self(),
    Clients = [spawn_link(fun() ->
                                  Self ! {self(), [status(shop_load:get(Port, path(Pattern)))
                                                   || _ <- lists:seq(1, ?N div 4)]}
                          end) || _ <- lists:seq(1, 4)],
    Statuses = lists:append([receive {C, S} -> S end || C <- Clients]),
    lists:foldl(fun(S, Acc) -> orddict:update_counter(S, 1, Acc) end, [], Statuses).

-spec path(string()) -> string().
path("/users/:id") -> "/users/" ++ integer_to_list(rand:uniform(2000));
path(Path) -> Path.

-spec status({integer(), binary()} | {error, term()}) -> integer() | {error, term()}.
status({error, _} = Error) -> Error;
status({Code, _}) -> Code.

%% The shop's beams: on the path already (make shop), or compiled now.
-spec ensure_shop() -> ok.
ensure_shop() ->
    [code:which(M) =/= non_existing
     orelse error({missing_debian_package, M, "run: apt-get install erlang-mochiweb "
                   "erlang-p1-sqlite3 erlang-bbmustache (or make deps)"})
     || M <- [mochiweb_http, sqlite3, bbmustache]],
    case code:which(shop) of
        non_existing ->
            Root = root(),
            Out = filename:join(Root, "_build/shop/ebin"),
            ok = filelib:ensure_path(Out),
            [{ok, _} = compile:file(F, [debug_info, {outdir, Out}, return_errors])
             || F <- filelib:wildcard(filename:join(Root, "examples/shop/src/*.erl"))],
            true = code:add_patha(Out),
            ok;
        _ ->
            ok
    end.

%% The repository: three levels above this test's source.
-spec root() -> file:filename().
root() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    filename:dirname(filename:dirname(filename:dirname(Src))).

-spec wall_ms(map()) -> number().
wall_ms(#{wall := #{mean := M}}) ->
    M.
