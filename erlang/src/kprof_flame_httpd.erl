%%% @doc An inets httpd module: a flame graph of a request that asks for one
%%% (`x-trace-request: true', or the secret), when the gate lets it (see
%%% {@link kprof_flame_web} and {@link kprof_web_gate}).
%%%
%%% ```
%%% application:set_env(kprof, allow_tracing, true),     % loopback clients
%%% inets:start(httpd, [{port, 8080}, {server_name, "shop"},
%%%                     {server_root, "/srv/shop"}, {document_root, "/srv/shop/www"},
%%%                     {modules, [kprof_flame_httpd, mod_alias, mod_esi, mod_get]}]).
%%% '''
%%% The files go to kprof's own directory (`~/.cache/kprof/http', mode
%%% 0700, files 0600) unless `{kprof_flame_opts, #{output_directory =>
%%% Dir}}' names another; never put them under the `document_root', where
%%% the server would hand them to anyone.
%%%
%%% Put it first: its `do/1' runs the modules after it itself, as
%%% {@link kprof:flame_apply/2} runs a function, then tells httpd the chain is done. httpd
%%% sends the response after that, once the capture has ended, so
%%% `x-kprof-files' names exactly the files the capture wrote (their base
%%% names): each exists when the response leaves. The header is added only
%%% to a response httpd sends after the chain, a module's `{proceed,
%%% [{response, {response, Head, Body}} | _]}'. A module that sends its
%%% response itself gets none: mod_get (a static file: it writes the file to
%%% the socket and answers `{already_sent, ...}'), mod_esi (`deliver'); the
%%% files are then only logged (info level). No header either when
%%% nothing was written (refused, no events, a failed write, which leaves no
%%% file). A request the gate refused runs the chain untraced; a client
%%% whose address may ask gets `x-kprof-refused: Reason' instead (the same
%%% responses only).
%%%
%%% `kprof_flame_opts' (optional) are flame_apply's options, checked when the
%%% server starts (`store/2'): bad ones stop `inets:start/2' with the reason.
-module(kprof_flame_httpd).

-include_lib("inets/include/httpd.hrl").

-export([do/1, store/2]).

-define(FORWARD_HEADERS, ["x-forwarded-for", "x-real-ip", "forwarded"]).

%% @doc The httpd module callback.
-spec do(#mod{}) -> {proceed, list()} | {break, list()} | done | {continue, term()}.
do(ModData = #mod{config_db = Db, parsed_header = Header, data = Data}) ->
    case proplists:get_value("x-trace-request", Header) of
        undefined ->
            {proceed, Data};
        Asked ->
            case kprof_flame_web:decide(Asked, peer(ModData)) of
                trace ->
                    Opts = httpd_util:lookup(Db, kprof_flame_opts, #{}),
                    Rest = fun() ->
                                   {kprof_tiers_httpd:run_rest(?MODULE, ModData),
                                    kprof_flame_web:refusal()}
                           end,
                    Mode = kprof_flame_web:mode(proplists:get_value("x-kprof-sample", Header)),
                    case kprof_flame_web:run(Rest, Opts, Mode) of
                        {{Outcome, undefined}, Files} ->
                            logger:info("kprof flame: traced ~s ~s: ~p",
                                        [ModData#mod.method, path(ModData#mod.request_uri),
                                         Files]),
                            done_with(Outcome, "x-kprof-files", names(Files));
                        {{Outcome, Refused}, _} ->
                            %% flame_apply refused (busy): the chain ran untraced.
                            done_with(Outcome, "x-kprof-refused", atom_to_list(Refused))
                    end;
                {refused, Reason, true} ->
                    done_with(kprof_tiers_httpd:run_rest(?MODULE, ModData), "x-kprof-refused",
                              atom_to_list(Reason));
                _ ->
                    {proceed, Data}
            end
    end.

%% @doc The httpd configuration callback: `kprof_flame_opts' must be
%% flame_apply's options. Only that option: httpd gives every other one to
%% the next module that takes it (a function clause here says "not mine").
-spec store({kprof_flame_opts, term()}, list()) ->
          {ok, {kprof_flame_opts, term()}} | {error, term()}.
store({kprof_flame_opts, Opts} = Option, _Config) ->
    case kprof_flame_options:validate(Opts, apply) of
        {ok, _} -> {ok, Option};
        {error, Reason} -> {error, {kprof_flame_opts, Reason}}
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec done_with({proceed, list()} | done | {continue, term()}, string(), string()) ->
          {break, list()} | done | {continue, term()}.
done_with({proceed, Data}, Header, Value) -> {break, with_header(Data, Header, Value)};
done_with(Other, _Header, _Value) -> Other.

-spec with_header(list(), string(), string()) -> list().
with_header(Data, _Header, "") ->
    Data;
with_header(Data, Header, Value) ->
    case lists:keyfind(response, 1, Data) of
        {response, {response, Head, Body}} ->
            lists:keyreplace(response, 1, Data,
                             {response, {response, Head ++ [{Header, Value}], Body}});
        _ ->
            Data
    end.

%% The client: the socket's peer as httpd recorded it, and whether a proxy
%% forwarded the request.
-spec peer(#mod{}) -> kprof_web_gate:peer().
peer(#mod{init_data = Init, parsed_header = Header}) ->
    IP = case Init of
             #init_data{peername = {_Port, Text}} when is_list(Text) ->
                 case inet:parse_address(Text) of
                     {ok, Addr} -> Addr;
                     {error, _} -> undefined
                 end;
             _ ->
                 undefined
         end,
    {IP, lists:any(fun(H) -> lists:keymember(H, 1, Header) end, ?FORWARD_HEADERS)}.

-spec names([file:filename_all()]) -> string().
names(Files) ->
    lists:flatten(lists:join(",", [unicode:characters_to_list(filename:basename(F))
                                   || F <- Files])).

%% The request's path, its query (which may hold a token) left out of the log.
-spec path(string()) -> string().
path(Uri) ->
    hd(string:split(Uri, "?")).
