%%% @doc Every HTTP request of an inets `httpd' server as a kprof request.
%%%
%%% httpd runs its `modules' one after the other for each request. Put
%%% `kprof_tiers_httpd' first: its `do/1' runs the rest of the chain itself,
%%% as {@link kprof:request/2} runs a fun, with the identity `{Method, Route}',
%%% then tells httpd the chain is done (`{break, Data}'), so every later
%%% module runs once, and inside the request. httpd writes the response
%%% after the chain; that write is not part of the request.
%%%
%%% ```
%%% inets:start(httpd, [{port, 8080}, {server_name, "shop"},
%%%                     {server_root, "/srv/shop"}, {document_root, "/srv/shop/www"},
%%%                     {modules, [kprof_tiers_httpd, mod_alias, mod_esi, mod_get]},
%%%                     {kprof_routes, ["/users/:id/orders", "/catalog", "/static/*"]}]).
%%% '''
%%% `Method' is the request method as httpd gives it (`"GET"'). `Route'
%%% is what the `kprof_route' function (httpd configuration, optional)
%%% returns for the request's path, else {@link route/2} of the path and
%%% the templates `kprof_routes' (optional): the first template the path
%%% matches (`"/users/42/orders?x=1"' is `"/users/:id/orders"'), else the
%%% path's shape, in which only numeric segments show (as `:id').
%%%
%%% The identity is a row of the report, and the sink keeps at most
%%% `max_identities' of them (200): it must not be something a client
%%% chooses. A path's text is the client's, so the default route never
%%% keeps a segment that no template names: any client can send `/x/1',
%%% `/y/2', ... and would otherwise fill the table, pushing the real routes
%%% into the folded `kprof_other_identities' row. Without the templates, a
%%% path no template matches is at most its first three segments, each
%%% `:id' (digits) or `*' (anything else), and `/**' when there were more:
%%% at most 23 such rows whatever clients send. Without tiers running, the
%%% chain just runs.
%%%
%%% Each request runs through {@link kprof_tiers:request/2}, what
%%% {@link kprof:request/2} calls: kprof's own modules never call the
%%% facade ({@link kprof}), which is the user's.
-module(kprof_tiers_httpd).

-include_lib("inets/include/httpd.hrl").

-export([do/1, identity/3, identity/4, route/1, route/2, run_rest/2]).

%% @doc The httpd module callback: runs the modules after this one as one
%% kprof request.
-spec do(#mod{}) -> {break, list()} | done | {continue, term()}.
do(ModData = #mod{config_db = Db, method = Method, request_uri = Uri}) ->
    Identity = identity(Method, Uri, httpd_util:lookup(Db, kprof_route, undefined),
                        httpd_util:lookup(Db, kprof_routes, [])),
    case kprof_tiers:request(Identity, fun() -> run_rest(?MODULE, ModData) end) of
        {proceed, Data} -> {break, Data};
        Other -> Other
    end.

%% @equiv identity(Method, Uri, RouteFun, [])
-spec identity(string(), string(), undefined | fun((string()) -> term())) ->
          {string(), term()}.
identity(Method, Uri, RouteFun) ->
    identity(Method, Uri, RouteFun, []).

%% @doc `{Method, Route}' for a request: `Route' from the route function
%% given, or {@link route/2} with the templates.
-spec identity(string(), string(), undefined | fun((string()) -> term()), [string()]) ->
          {string(), term()}.
identity(Method, Uri, undefined, Templates) ->
    {Method, route(path(Uri), Templates)};
identity(Method, Uri, RouteFun, _Templates) when is_function(RouteFun, 1) ->
    {Method, RouteFun(path(Uri))}.

%% @equiv route(Path, [])
-spec route(string()) -> string().
route(Path) ->
    route(Path, []).

%% @doc The route of a path (its query dropped): the first of the
%% templates it matches, else its shape. A template is a path whose
%% segments are literals, `:Name' (any one segment) or, last, `*' (the
%% rest, one segment or more): `"/users/:id/orders"', `"/static/*"'. The
%% shape keeps at most three segments, each `:id' (digits only) or `*'
%% (anything else), and ends `/**' when the path had more: a client never
%% chooses a route's text (see the module doc).
-spec route(string(), [string()]) -> string().
route(Path0, Templates) ->
    Path = path(Path0),
    Segments = segments(Path),
    case [T || T <- Templates, matches(segments(T), Segments)] of
        [T | _] -> T;
        [] -> shape(Segments, 0)
    end.

%% @doc Runs the httpd modules configured after `Me' on `ModData', as httpd's
%% own traversal would, and returns what httpd expects from `Me' itself
%% (kprof_flame_httpd wraps the rest of the chain the same way).
-spec run_rest(module(), #mod{}) -> {proceed, list()} | done | {continue, term()}.
run_rest(Me, ModData = #mod{config_db = Db}) ->
    traverse(ModData, after_me(Me, httpd_util:lookup(Db, modules, []))).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% What httpd's own traversal does with each module's answer.
-spec traverse(#mod{}, [module()]) -> {proceed, list()} | done | {continue, term()}.
traverse(ModData, []) ->
    {proceed, ModData#mod.data};
traverse(ModData, [Module | Rest]) ->
    case Module:do(ModData) of
        {proceed, Data} -> traverse(ModData#mod{data = Data}, Rest);
        {break, Data} -> {proceed, Data};
        done -> done;
        {continue, _} = Continue -> Continue
    end.

-spec after_me(module(), [module()]) -> [module()].
after_me(Me, [Me | Rest]) -> Rest;
after_me(Me, [_ | Rest]) -> after_me(Me, Rest);
after_me(_Me, []) -> [].

-spec path(string()) -> string().
path(Uri) ->
    [Path | _] = string:split(Uri, "?"),
    Path.

%% A path's segments, the empty ones (a leading or trailing slash) left out.
-spec segments(string()) -> [string()].
segments(Path) ->
    string:lexemes(Path, "/").

-spec matches([string()], [string()]) -> boolean().
matches(["*"], [_ | _]) -> true;
matches([":" ++ _ | T], [_ | P]) -> matches(T, P);
matches([S | T], [S | P]) -> matches(T, P);
matches([], []) -> true;
matches(_, _) -> false.

-define(SHAPE_SEGMENTS, 3).
-spec shape([string()], non_neg_integer()) -> string().
shape([], 0) -> "/";
shape([], _N) -> "";
shape([_ | _], ?SHAPE_SEGMENTS) -> "/**";
shape([S | Rest], N) -> "/" ++ segment(S) ++ shape(Rest, N + 1).

-spec segment(string()) -> string().
segment(S) ->
    case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, S) of
        true -> ":id";
        false -> "*"
    end.
