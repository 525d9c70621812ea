%%% @doc The shop's HTTP tier: one handler per page, called by the
%%% mochiweb loop ({@link shop_web:loop/1}) once it has routed the
%%% request.
%%%
%%% {@link handle/3} is where a request of the shop begins: its first
%%% argument is the route, `{Method, Pattern}' (`{"GET", "/users/:id"}'),
%%% which makes it a good kprof `entry' with `identity => {arg, 1}':
%%% ```
%%% kprof:start_tiers([{http, [{shop_http, '_', '_'}]},
%%%                    {database, [{shop_db, '_', '_'}]},
%%%                    {templating, [{shop_tpl, '_', '_'}]}],
%%%                   #{entry => {shop_http, handle, 3}, identity => {arg, 1}}).
%%% '''
%%% Each handler asks {@link shop_db} for rows (a call to a pool worker),
%%% has {@link shop_tpl} render them, and writes the response, so the
%%% whole request, response included, happens inside `handle/3'.
-module(shop_http).

-export([handle/3]).
%% One per page (tier functions; flame_capture targets).
-export([index/1, user/2, report/1, catalog/1, not_found/1]).

%% @doc Answer a routed request: `Route' is `{Method, Pattern}', `Args'
%% the values of the pattern's `:id' segments.
-spec handle({string(), string()}, [integer()], term()) -> term().
handle({"GET", "/"}, [], Req) ->
    index(Req);
handle({"GET", "/users/:id"}, [Id], Req) ->
    user(Id, Req);
handle({"GET", "/report"}, [], Req) ->
    report(Req);
handle({"GET", "/catalog"}, [], Req) ->
    catalog(Req);
handle(_Route, _Args, Req) ->
    not_found(Req).

%% @doc The home page.
-spec index(term()) -> term().
index(Req) ->
    html(Req, 200, shop_tpl:index_page()).

%% @doc GET /users/:id: a primary-key lookup.
-spec user(integer(), term()) -> term().
user(Id, Req) ->
    case shop_db:user(Id) of
        {ok, User, Orders} -> html(Req, 200, shop_tpl:user_page(User, Orders));
        not_found -> not_found(Req)
    end.

%% @doc GET /report: aggregates over every order.
-spec report(term()) -> term().
report(Req) ->
    {ok, ByCategory, Best} = shop_db:report(),
    html(Req, 200, shop_tpl:report_page(ByCategory, Best)).

%% @doc GET /catalog[?n=N]: `N' products (default: option `catalog_size'
%% of {@link shop:start/1}) on one page.
-spec catalog(term()) -> term().
catalog(Req) ->
    N = limit(proplists:get_value("n", mochiweb_request:parse_qs(Req)),
              shop:config(catalog_size)),
    {ok, Products} = shop_db:catalog(N),
    html(Req, 200, shop_tpl:catalog_page(Products)).

%% @doc 404.
-spec not_found(term()) -> term().
not_found(Req) ->
    html(Req, 404, shop_tpl:not_found_page(mochiweb_request:get(path, Req))).

-spec html(term(), 200 | 404, binary()) -> term().
html(Req, Code, Body) ->
    mochiweb_request:respond({Code, [{"Content-Type", "text/html; charset=utf-8"}], Body}, Req).

-spec limit(string() | undefined, pos_integer()) -> pos_integer().
limit(undefined, Default) ->
    Default;
limit(Value, Default) ->
    try list_to_integer(Value) of
        N when N > 0 -> min(N, 10000);
        _ -> Default
    catch
        error:badarg -> Default
    end.
