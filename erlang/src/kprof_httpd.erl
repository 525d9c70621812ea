%%% @doc Every HTTP request of an inets `httpd' server as a kprof request.
%%%
%%% httpd runs its `modules' one after the other for each request. Put
%%% `kprof_httpd' first: its `do/1' runs the rest of the chain itself,
%%% inside {@link kprof:request/2}, with the identity `{Method, Route}',
%%% then tells httpd the chain is done (`{break, Data}'), so every later
%%% module runs once, and inside the request. httpd writes the response
%%% after the chain; that write is not part of the request.
%%%
%%% ```
%%% inets:start(httpd, [{port, 8080}, {server_name, "shop"},
%%%                     {server_root, "/tmp"}, {document_root, "/tmp"},
%%%                     {modules, [kprof_httpd, mod_alias, mod_esi, mod_get]},
%%%                     {kprof_route, fun(Path) -> my_router:route(Path) end}]).
%%% '''
%%% `Method' is the request method as httpd gives it (`"GET"'). `Route'
%%% is what the `kprof_route' function (httpd configuration, optional)
%%% returns for the request's path, or {@link route/1}: the path without
%%% its query, numeric segments replaced by `:id' (`"/users/42/orders?x=1"'
%%% becomes `"/users/:id/orders"'). Without tiers running, the chain just
%%% runs.
%%%
%%% An integration module, like a user's code: it calls the facade
%%% ({@link kprof:request/2}), as an application would; kprof's own modules
%%% never do.
-module(kprof_httpd).

-include_lib("inets/include/httpd.hrl").

-export([do/1, identity/3, route/1, run_rest/2]).

%% @doc The httpd module callback: runs the modules after this one as one
%% kprof request.
-spec do(#mod{}) -> {break, list()} | done | {continue, term()}.
do(ModData = #mod{config_db = Db, method = Method, request_uri = Uri}) ->
    Identity = identity(Method, Uri, httpd_util:lookup(Db, kprof_route, undefined)),
    case kprof:request(Identity, fun() -> run_rest(?MODULE, ModData) end) of
        {proceed, Data} -> {break, Data};
        Other -> Other
    end.

%% @doc `{Method, Route}' for a request: `Route' from the route function
%% given, or {@link route/1}.
-spec identity(string(), string(), undefined | fun((string()) -> term())) ->
          {string(), term()}.
identity(Method, Uri, undefined) ->
    {Method, route(path(Uri))};
identity(Method, Uri, RouteFun) when is_function(RouteFun, 1) ->
    {Method, RouteFun(path(Uri))}.

%% @doc The default route of a path: its query dropped, every segment
%% made of digits replaced by `:id'.
-spec route(string()) -> string().
route(Path) ->
    Segments = string:split(path(Path), "/", all),
    lists:flatten(lists:join("/", [segment(S) || S <- Segments])).

%% @doc Runs the httpd modules configured after `Me' on `ModData', as httpd's
%% own traversal would, and returns what httpd expects from `Me' itself
%% (kprof_httpd_flame wraps the rest of the chain the same way).
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

-spec segment(string()) -> string().
segment([]) -> [];
segment(S) ->
    case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, S) of
        true -> ":id";
        false -> S
    end.
