%%% @doc The web entry helpers with real HTTP over loopback: an inets
%%% httpd server with kprof_tiers_httpd first in its chain, and a mochiweb
%%% server whose loop is kprof_tiers_mochiweb:loop/2; httpc makes the requests.
-module(kprof_web_tests).

-include_lib("eunit/include/eunit.hrl").

-import(kprof_test_report, [report/0, row/2, calls/2, self_mean/2]).

%% The loop of the mochiweb test (called through a fun).
-export([app/1]).

-define(W, kprof_tiers_work).
-define(TIERS, [{handler, [{kprof_web_handler, do, 1}]}, {work, [{?W, sleep_a, 1}]}]).

-spec web_test_() -> term().
web_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [{Title, {timeout, 120, Test}}
      || {Title, Test} <- [{"kprof_tiers_httpd: one request per HTTP request, {Method, Route}", fun httpd/0},
                           {"kprof_tiers_httpd: a route function from the httpd configuration",
                            fun httpd_route/0},
                           {"kprof_tiers_httpd: without tiers the chain just runs", fun httpd_untraced/0},
                           {"kprof_tiers_mochiweb: the loop fun", fun mochiweb/0},
                           {"the default route", fun route/0}]]}.

-spec httpd() -> term().
httpd() ->
    ok = kprof:start_tiers(?TIERS, #{}),
    {Pid, Url} = start_httpd([{kprof_routes, ["/users/:id", "/orders/:id/items/:item",
                                              "/users"]}]),
    try
        [{200, "hello"} = http_get(Url ++ "/users/42") || _ <- lists:seq(1, 3)],
        [{200, "hello"} = http_get(Url ++ "/users/7") || _ <- lists:seq(1, 2)],
        [{200, "hello"} = http_get(Url ++ "/orders/1/items/99?x=1") || _ <- lists:seq(1, 2)],
        {200, "hello"} = post(Url ++ "/users", "name=x"),
        %% No template: the path's shape, never the client's text.
        {500, _} = http_get(Url ++ "/crash"),
        [{200, "hello"} = http_get(Url ++ "/junk-" ++ integer_to_list(I)) || I <- lists:seq(1, 3)],
        R = report(),
        Want = [{{"GET", "/users/:id"}, 5}, {{"GET", "/*"}, 4},
                {{"GET", "/orders/:id/items/:item"}, 2}, {{"POST", "/users"}, 1}],
        Got = [{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, R)],
        %% Lost or late: the header says (inflight, dropped, incomplete).
        Got =:= Want orelse ?debugFmt("the report's header: ~p", [kprof_test_report:header(R)]),
        ?assertEqual(Want, Got),
        Row = row(R, {"GET", "/users/:id"}),
        ?assertEqual(5, calls(Row, handler)),
        ?assertEqual(5, calls(Row, work)),
        ?assert(self_mean(Row, work) >= 2.0)
    after
        inets:stop(httpd, Pid)
    end.

-spec httpd_route() -> term().
httpd_route() ->
    ok = kprof:start_tiers(?TIERS, #{}),
    Route = fun("/api/" ++ Rest) -> {api, hd(string:split(Rest, "/"))}; (_) -> other end,
    {Pid, Url} = start_httpd([{kprof_route, Route}]),
    try
        {200, _} = http_get(Url ++ "/api/users/1"),
        {200, _} = http_get(Url ++ "/api/users/2"),
        {200, _} = http_get(Url ++ "/static/x.css"),
        ?assertEqual([{{"GET", {api, "users"}}, 2}, {{"GET", other}, 1}],
                     [{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, report())])
    after
        inets:stop(httpd, Pid)
    end.

-spec httpd_untraced() -> term().
httpd_untraced() ->
    {Pid, Url} = start_httpd([]),
    try
        ?assertEqual({200, "hello"}, http_get(Url ++ "/users/1"))
    after
        inets:stop(httpd, Pid)
    end.

-spec mochiweb() -> term().
mochiweb() ->
    ok = kprof:start_tiers([{app, [{kprof_web_tests, app, 1}]}, {work, [{?W, sleep_a, 1}]}], #{}),
    Loop = kprof_tiers_mochiweb:loop(fun ?MODULE:app/1, #{}),
    {ok, _} = mochiweb_http:start([{name, kprof_mochi_test}, {ip, {127, 0, 0, 1}}, {port, 0},
                                    {loop, Loop}]),
    try
        Port = mochiweb_socket_server:get(kprof_mochi_test, port),
        Url = "http://127.0.0.1:" ++ integer_to_list(Port),
        [{200, "hi"} = http_get(Url ++ "/items/" ++ integer_to_list(I)) || I <- lists:seq(1, 3)],
        {200, "hi"} = post(Url ++ "/items", "x"),
        R = report(),
        %% Without templates only the numeric segments show.
        ?assertEqual([{{"GET", "/*/:id"}, 3}, {{"POST", "/*"}, 1}],
                     [{Id, N} || #{identity := Id, requests := N} <- maps:get(rows, R)]),
        Row = row(R, {"GET", "/*/:id"}),
        ?assertEqual(3, calls(Row, app)),
        ?assert(self_mean(Row, work) >= 2.0),
        %% A custom route.
        ok = kprof:reset(),
        mochiweb_http:stop(kprof_mochi_test),
        Loop2 = kprof_tiers_mochiweb:loop(fun ?MODULE:app/1, #{route => fun(P) -> {path, P} end}),
        {ok, _} = mochiweb_http:start([{name, kprof_mochi_test}, {ip, {127, 0, 0, 1}},
                                        {port, 0}, {loop, Loop2}]),
        Port2 = mochiweb_socket_server:get(kprof_mochi_test, port),
        {200, "hi"} = http_get("http://127.0.0.1:" ++ integer_to_list(Port2) ++ "/a/1"),
        ?assertMatch([#{identity := {"GET", {path, "/a/1"}}}], maps:get(rows, report()))
    after
        mochiweb_http:stop(kprof_mochi_test)
    end.

-spec route() -> term().
route() ->
    T = ["/users/:id/orders", "/users/:id", "/static/*", "/"],
    ?assertEqual("/", kprof_tiers_httpd:route("/", T)),
    ?assertEqual("/users/:id", kprof_tiers_httpd:route("/users/42", T)),
    ?assertEqual("/users/:id", kprof_tiers_httpd:route("/users/bob", T)),
    ?assertEqual("/users/:id/orders", kprof_tiers_httpd:route("/users/42/orders?since=3", T)),
    ?assertEqual("/static/*", kprof_tiers_httpd:route("/static/css/site.css", T)),
    %% No template: the shape, at most three segments.
    ?assertEqual("/*", kprof_tiers_httpd:route("/static", T)),
    ?assertEqual("/*/:id/*", kprof_tiers_httpd:route("/users/42/secret-token", T)),
    ?assertEqual("/*/*/:id", kprof_tiers_httpd:route("/v2/x1/007/")),
    ?assertEqual("/*/*/*/**", kprof_tiers_httpd:route("/a/b/c/d/e/f")),
    ?assertEqual("/", kprof_tiers_httpd:route("/")),
    %% Whatever clients send, few rows: 1 + 2 + 4 + 8 + 8 shapes.
    Junk = [lists:flatten(["/" ++ S || S <- P])
            || N <- lists:seq(0, 5),
               P <- [[case rand:uniform(3) of 1 -> "x"; 2 -> "12"; 3 -> "y" ++ integer_to_list(I) end
                      || _ <- lists:seq(1, N)] || I <- lists:seq(1, 200)]],
    ?assert(length(lists:usort([kprof_tiers_httpd:route(P) || P <- Junk])) =< 23),
    ?assertEqual({"GET", "/*/:id"}, kprof_tiers_httpd:identity("GET", "/a/1?q", undefined)),
    ?assertEqual({"GET", "/a/:n"}, kprof_tiers_httpd:identity("GET", "/a/1?q", undefined, ["/a/:n"])),
    ?assertEqual({"PUT", 4}, kprof_tiers_httpd:identity("PUT", "/a/1?q", fun(P) -> length(P) end)).

%%% The mochiweb application

%% @doc The application's loop: a tier, some work, an answer.
-spec app(term()) -> term().
app(Req) ->
    ?W:sleep_a(2),
    mochiweb_request:ok({"text/plain", "hi"}, Req).

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

-spec setup() -> ok.
setup() ->
    logger:set_handler_config(default, level, emergency),
    {ok, _} = application:ensure_all_started(inets),
    ok = kprof_test_util:start(#{}),
    ok.

-spec cleanup(ok) -> ok.
cleanup(_) ->
    _ = kprof:stop_tiers(),
    ok = kprof:stop(),
    logger:set_handler_config(default, level, all),
    ok.

-spec start_httpd(list()) -> {pid(), string()}.
start_httpd(Extra) ->
    Dir = filename:basedir(user_cache, "kprof_web_tests"),
    ok = filelib:ensure_path(Dir),
    {ok, Pid} = inets:start(httpd, [{port, 0}, {server_name, "kprof_test"},
                                    {server_root, Dir}, {document_root, Dir},
                                    {bind_address, {127, 0, 0, 1}},
                                    {modules, [kprof_tiers_httpd, kprof_web_handler]} | Extra]),
    [{port, Port}] = httpd:info(Pid, [port]),
    {Pid, "http://127.0.0.1:" ++ integer_to_list(Port)}.

-spec http_get(string()) -> {integer(), string()}.
http_get(Url) ->
    {ok, {{_, Code, _}, _, Body}} = kprof_test_util:http(get, {Url, []}, []),
    {Code, Body}.

-spec post(string(), string()) -> {integer(), string()}.
post(Url, Body) ->
    {ok, {{_, Code, _}, _, RBody}} =
        kprof_test_util:http(post, {Url, [], "application/x-www-form-urlencoded", Body}, []),
    {Code, RBody}.

