%%% @doc A flame graph of one HTTP request, asked for by the request itself.
%%%
%%% A request carrying the header `x-trace-request: true' is run under
%%% {@link kprof:flame_apply/2} in the process that handles it, and the
%%% response says where the files are in an `x-kprof-files' header (the
%%% paths, comma separated). Only when the application environment says so:
%%% `application:set_env(kprof, allow_tracing, true)' (off by default);
%%% otherwise such requests run as usual and are counted
%%% ({@link refused/0}).
%%%
%%% <ul>
%%% <li>inets httpd: put {@link kprof_httpd_flame} first in `modules';</li>
%%% <li>mochiweb: `Loop = kprof_flame_web:mochiweb(fun my_app:loop/1, Opts)',
%%%     `mochiweb_http:start([{loop, Loop}, ...])'. mochiweb writes the
%%%     response from inside the loop, so the loop adds the header itself:
%%%     `Req:respond({200, kprof_flame_web:headers() ++ Hs, Body})'
%%%     (`headers()' is `[]' outside a traced request).</li>
%%% </ul>
%%% `Opts' are flame_apply's (default: folded and SVG into the current
%%% directory); the files are named `kprof-http-<microseconds>-<unique>'.
-module(kprof_flame_web).

-export([mochiweb/2, decide/1, run/2, headers/0, refused/0]).

-define(HEADER, "x-trace-request").
-define(REPLY_HEADER, "x-kprof-files").
-define(FILES_KEY, '$kprof_flame_files').
-define(REFUSED_KEY, {?MODULE, refused}).

%% @doc A mochiweb loop fun that runs `Loop(Req)' traced when the request
%% asks for it and tracing is allowed.
-spec mochiweb(fun((term()) -> term()), kprof_flame:opts()) -> fun((term()) -> term()).
mochiweb(Loop, Opts) when is_function(Loop, 1), is_map(Opts) ->
    fun(Req) ->
            case decide(mochiweb_request:get_header_value(?HEADER, Req)) of
                trace -> element(1, run(fun() -> Loop(Req) end, Opts));
                _ -> Loop(Req)
            end
    end.

%% @doc What to do with a request whose `x-trace-request' header has this
%% value (`undefined' when absent): `trace', `refused' (asked for while
%% `allow_tracing' is off; counted) or `none'.
-spec decide(undefined | string() | binary()) -> trace | refused | none.
decide(undefined) ->
    none;
decide(V) when is_binary(V) ->
    decide(binary_to_list(V));
decide(V) ->
    case string:lowercase(string:trim(V)) of
        "true" ->
            case application:get_env(kprof, allow_tracing, false) of
                true -> trace;
                _ -> count_refused(), refused
            end;
        _ ->
            none
    end.

%% @doc Run `Fun' under flame_apply with the files' names decided first, so
%% {@link headers/0} can name them from inside `Fun'. Returns `Fun''s
%% result and the files (`[]' when the capture failed; logged).
-spec run(fun(() -> Result), kprof_flame:opts()) -> {Result, [file:filename()]}.
run(Fun, Opts0) ->
    %% Unique across restarts too: the header names the files before they exist.
    Name = lists:flatten(io_lib:format("kprof-http-~b-~b", [erlang:system_time(microsecond),
                                                            erlang:unique_integer([positive])])),
    Opts = maps:merge(#{output_format => [folded, svg]}, Opts0#{name => Name}),
    case kprof_flame:validate(Opts, apply) of
        {ok, Cfg} ->
            Planned = kprof_flame:planned_files(Cfg),
            Old = put(?FILES_KEY, Planned),
            %% Whether Fun ran, when flame_apply says no: it must not run twice.
            Ran = make_ref(),
            Traced = fun() -> R = Fun(), put(Ran, {ran, R}), R end,
            try kprof:flame_apply(Traced, Opts) of
                {ok, Result, Files} ->
                    {Result, Files};
                {error, {aborted, _Kind, Result, Files}} ->
                    {Result, Files};
                {error, Reason} ->
                    logger:warning("kprof flame: traced request not captured: ~p", [Reason]),
                    case erase(Ran) of
                        {ran, Result} -> {Result, []};
                        undefined -> {Fun(), []}
                    end
            after
                _ = erase(Ran),
                restore(Old)
            end;
        {error, Reason} ->
            logger:warning("kprof flame: bad options for traced requests: ~p", [Reason]),
            {Fun(), []}
    end.

%% @doc `[{"x-kprof-files", Paths}]' inside a traced request, `[]' outside.
-spec headers() -> [{string(), string()}].
headers() ->
    case get(?FILES_KEY) of
        Files when is_list(Files), Files =/= [] -> [{?REPLY_HEADER, lists:join(",", Files)}];
        _ -> []
    end.

%% @doc How many requests asked to be traced while tracing was not allowed.
-spec refused() -> non_neg_integer().
refused() ->
    counters:get(refused_counter(), 1).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec count_refused() -> ok.
count_refused() ->
    counters:add(refused_counter(), 1, 1).

-spec refused_counter() -> counters:counters_ref().
refused_counter() ->
    case persistent_term:get(?REFUSED_KEY, undefined) of
        undefined ->
            %% Two first refusals at once may each make one: a count is lost.
            C = counters:new(1, [write_concurrency]),
            persistent_term:put(?REFUSED_KEY, C),
            C;
        C ->
            C
    end.

-spec restore(term()) -> term().
restore(undefined) -> erase(?FILES_KEY);
restore(Old) -> put(?FILES_KEY, Old).
