%%% @doc Every HTTP request of a mochiweb server as a kprof request.
%%%
%%% ```
%%% Loop = kprof_tiers_mochiweb:loop(fun my_app:handle/1,
%%%                            #{routes => ["/users/:id", "/catalog", "/static/*"]}),
%%% mochiweb_http:start([{name, shop}, {port, 8080}, {loop, Loop}]).
%%% '''
%%% The loop fun runs the application's loop as {@link kprof:request/2}
%%% runs a fun, with the identity `{Method, Route}': `Method'
%%% a string (`"GET"'), `Route' what option `route' (a fun of the path)
%%% returns, by default {@link kprof_tiers_httpd:route/2} of the path and option
%%% `routes' (templates; the first one the path matches, else a shape in
%%% which only numeric segments show: a client never chooses a row of the
%%% report, see {@link kprof_tiers_httpd}). mochiweb writes the response from
%%% within the loop, so the request includes it. mochiweb is not a dependency of kprof: this
%%% module only calls `mochiweb_request:get/2'.
%%%
%%% Each request runs through {@link kprof_tiers:request/2}, what
%%% {@link kprof:request/2} calls: kprof's own modules never call the
%%% facade ({@link kprof}), which is the user's.
-module(kprof_tiers_mochiweb).

-export([loop/2]).

-export_type([opts/0]).

-type opts() :: #{route => fun((string()) -> term()), routes => [string()]}.

%% @doc A loop fun for `mochiweb_http:start/1' that runs `Fun(Req)' as a
%% kprof request.
-spec loop(fun((term()) -> term()), opts()) -> fun((term()) -> term()).
loop(Fun, Opts) when is_function(Fun, 1), is_map(Opts) ->
    Templates = maps:get(routes, Opts, []),
    Route = maps:get(route, Opts, fun(Path) -> kprof_tiers_httpd:route(Path, Templates) end),
    fun(Req) ->
            Method = method(mochiweb_request:get(method, Req)),
            Path = mochiweb_request:get(path, Req),
            kprof_tiers:request({Method, Route(Path)}, fun() -> Fun(Req) end)
    end.

-spec method(atom() | string() | binary()) -> string().
method(M) when is_atom(M) -> atom_to_list(M);
method(M) when is_binary(M) -> binary_to_list(M);
method(M) -> M.
