%%% @doc The mochiweb side of the shop: the server and its loop, which
%%% routes a request and hands it to {@link shop_http:handle/3}.
-module(shop_web).

-export([start_link/2, port/0, loop/1, route/2]).

-define(SERVER, shop_web_server).

%% @doc Start the mochiweb server on 127.0.0.1, port `Port' (0: a free
%% one). `Wrap' is `plain', or `kprof_tiers_mochiweb' to run every request of
%% the loop inside `kprof:request/2' (kprof's mochiweb helper) instead of
%% using an `entry' function.
-spec start_link(inet:port_number(), plain | kprof_tiers_mochiweb) -> {ok, pid()} | {error, term()}.
start_link(Port, Wrap) ->
    Loop = case Wrap of
               plain -> fun ?MODULE:loop/1;
               %% The shop's routes as templates: a path that is none of them
               %% is one row of its shape ("/*"), never the client's text.
               kprof_tiers_mochiweb -> kprof_tiers_mochiweb:loop(fun ?MODULE:loop/1,
                                                     #{routes => ["/", "/users/:id", "/catalog",
                                                                  "/report"]})
           end,
    mochiweb_http:start_link([{name, ?SERVER}, {ip, {127, 0, 0, 1}}, {port, Port},
                              {loop, Loop}]).

%% @doc The port the server listens on.
-spec port() -> inet:port_number().
port() ->
    mochiweb_socket_server:get(?SERVER, port).

%% @doc The loop: route, then {@link shop_http:handle/3}.
-spec loop(term()) -> term().
loop(Req) ->
    Method = atom_to_list(mochiweb_request:get(method, Req)),
    {Route, Args} = route(Method, mochiweb_request:get(path, Req)),
    shop_http:handle(Route, Args, Req).

%% @doc `{{Method, Pattern}, Args}' for a path: numeric segments become
%% `:id' in the pattern and integers in `Args'.
-spec route(string(), string()) -> {{string(), string()}, [integer()]}.
route(Method, Path) ->
    Segments = [segment(S) || S <- string:lexemes(Path, "/")],
    Pattern = lists:append(["/" ++ P || {P, _} <- Segments]),
    {{Method, case Pattern of "" -> "/"; _ -> Pattern end},
     [I || {_, I} <- Segments, is_integer(I)]}.

-spec segment(string()) -> {string(), integer() | none}.
segment(S) ->
    try list_to_integer(S) of
        I when I >= 0 -> {":id", I};
        _ -> {S, none}
    catch
        error:badarg -> {S, none}
    end.
