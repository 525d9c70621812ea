%%% @doc An inets httpd module: a flame graph of a request that asks for one
%%% (`x-trace-request: true'), when `allow_tracing' is set (see
%%% {@link kprof_flame_web}).
%%%
%%% ```
%%% application:set_env(kprof, allow_tracing, true),
%%% inets:start(httpd, [{port, 8080}, {server_name, "shop"},
%%%                     {server_root, "/tmp"}, {document_root, "/tmp"},
%%%                     {modules, [kprof_httpd_flame, mod_alias, mod_esi, mod_get]},
%%%                     {kprof_flame_opts, #{output_directory => "/tmp/flames"}}]).
%%% '''
%%% Put it first: its `do/1' runs the modules after it itself, under
%%% {@link kprof:flame_apply/2}, then tells httpd the chain is done. httpd
%%% sends the response after that, once the capture has ended, so
%%% `x-kprof-files' names exactly the files the capture wrote: every path in
%%% it exists when the response leaves. It is left out when nothing was
%%% written (flame_apply refused to start, e.g. while tiers run or with
%%% every capture slot of the sink taken; no events; a failed write, which
%%% leaves no file), and when a module sent the response itself (mod_esi's
%%% `deliver': out before the files exist; they are only logged). It is
%%% added to a response left to httpd as `{response, {response, Head,
%%% Body}}' (mod_get and most modules). `kprof_flame_opts' (optional) are
%%% flame_apply's options.
-module(kprof_httpd_flame).

-include_lib("inets/include/httpd.hrl").

-export([do/1]).

%% @doc The httpd module callback.
-spec do(#mod{}) -> {proceed, list()} | {break, list()} | done | {continue, term()}.
do(ModData = #mod{config_db = Db, parsed_header = Header, data = Data}) ->
    case kprof_flame_web:decide(proplists:get_value("x-trace-request", Header)) of
        trace ->
            Opts = httpd_util:lookup(Db, kprof_flame_opts, #{}),
            {Outcome, Files} =
                kprof_flame_web:run(fun() -> kprof_httpd:run_rest(?MODULE, ModData) end, Opts),
            logger:notice("kprof flame: traced ~s ~s: ~p",
                          [ModData#mod.method, ModData#mod.request_uri, Files]),
            case Outcome of
                {proceed, Data1} -> {break, with_header(Data1, Files)};
                Other -> Other
            end;
        _ ->
            {proceed, Data}
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec with_header(list(), [file:filename()]) -> list().
with_header(Data, []) ->
    Data;
with_header(Data, Files) ->
    Value = lists:flatten(lists:join(",", Files)),
    case lists:keyfind(response, 1, Data) of
        {response, {response, Head, Body}} ->
            lists:keyreplace(response, 1, Data,
                             {response, {response, Head ++ [{"x-kprof-files", Value}], Body}});
        _ ->
            Data
    end.
