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
%%% <li>inets httpd: put {@link kprof_httpd_flame} first in `modules'. The
%%%     header is added after the capture has ended and names exactly the
%%%     files it wrote: every path in it exists when the response leaves.
%%%     No header when nothing was written (flame_apply refused to start,
%%%     e.g. while tiers run or with every capture slot of the sink taken;
%%%     no events; a write failed, e.g. a full disk: the sink then removes
%%%     every file of the capture).</li>
%%% <li>mochiweb: `Loop = kprof_flame_web:mochiweb(fun my_app:loop/1, Opts)',
%%%     `mochiweb_http:start([{loop, Loop}, ...])'. mochiweb writes the
%%%     response from inside the loop, before the capture ends, so the loop
%%%     adds the header itself:
%%%     `Req:respond({200, kprof_flame_web:headers() ++ Hs, Body})'.
%%%     `headers()' names the files only once the capture has started, and
%%%     is `[]' outside a traced request and when flame_apply refused to
%%%     start (the loop then runs untraced). The files exist once the loop
%%%     has returned, unless the capture fails at its end (no events, a
%%%     failed write): then none of them does, and a warning says so.</li>
%%% </ul>
%%% `Opts' are flame_apply's (default: folded and SVG into the current
%%% directory); the files are named `kprof-http-<microseconds>-<unique>'.
%%%
%%% An integration module, like a user's code: it calls the facade
%%% ({@link kprof:flame_apply/2}, which checks the options' shape), as an
%%% application would; kprof's own modules never do.
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
%% {@link headers/0} can name them from inside `Fun' once the capture has
%% started. Returns `Fun''s result and the files written (`[]' when the
%% capture was refused or failed; logged). `Fun' runs once either way:
%% untraced, and with `headers()' `[]', when flame_apply refused to start.
-spec run(fun(() -> Result), kprof_flame:opts()) -> {Result, [file:filename()]}.
run(Fun, Opts0) ->
    %% Unique across restarts too: the header names the files before they exist.
    Name = lists:flatten(io_lib:format("kprof-http-~b-~b", [erlang:system_time(microsecond),
                                                            erlang:unique_integer([positive])])),
    %% No progress lines: a server's console is nobody's shell.
    Opts = maps:merge(#{output_format => [folded, svg], progress => false},
                      Opts0#{name => Name}),
    case kprof_flame:validate(Opts, apply) of
        {ok, Cfg} ->
            Planned = kprof_flame:planned_files(Cfg),
            %% Whether Fun ran, when flame_apply says no: it must not run twice.
            Ran = make_ref(),
            %% flame_apply calls Traced only once the capture has started: the
            %% names are there for headers() from then on, and never when it
            %% refused (tiers running, too many captures, another tracer, ...).
            Traced = fun() ->
                             Old = put(?FILES_KEY, {Planned, false}),
                             try Fun() of
                                 R -> put(Ran, {ran, R}), R
                             after
                                 said_planned(erase(?FILES_KEY), Ran),
                                 restore(Old)
                             end
                     end,
            try kprof:flame_apply(Traced, Opts) of
                {ok, Result, Files} ->
                    {Result, checked(Files, Planned, Ran)};
                {ok, Result, Files, _Top} ->
                    %% top => N: the table went to this process's group leader.
                    {Result, checked(Files, Planned, Ran)};
                {error, {aborted, _Kind, Result, Files}} ->
                    {Result, checked(Files, Planned, Ran)};
                {error, Reason} ->
                    logger:warning("kprof flame: traced request not captured: ~p", [Reason]),
                    _ = checked([], Planned, Ran),
                    case erase(Ran) of
                        {ran, Result} -> {Result, []};
                        undefined -> {Fun(), []}
                    end
            after
                _ = erase(Ran),
                _ = erase({Ran, said})
            end;
        {error, Reason} ->
            logger:warning("kprof flame: bad options for traced requests: ~p", [Reason]),
            {Fun(), []}
    end.

%% @doc `[{"x-kprof-files", Paths}]' inside a traced request whose capture
%% has started, `[]' otherwise (outside one, or flame_apply refused to start).
%% The paths are those the capture will write: they exist once the traced
%% function has returned, unless the capture fails at its end (then none of
%% them does, and a warning names them).
-spec headers() -> [{string(), string()}].
headers() ->
    case get(?FILES_KEY) of
        {Files, _} when is_list(Files), Files =/= [] ->
            put(?FILES_KEY, {Files, true}),
            [{?REPLY_HEADER, lists:flatten(lists:join(",", Files))}];
        _ ->
            []
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

%% Whether headers/0 gave the planned names out during the capture.
-spec said_planned(term(), reference()) -> term().
said_planned({_, true}, Ran) -> put({Ran, said}, true);
said_planned(_, _Ran) -> ok.

%% The files written; a warning when headers/0 named others (a response that
%% left before the capture ended: the capture failed, or the sink had to
%% rename because a file of that name existed).
-spec checked([file:filename()], [file:filename()], reference()) -> [file:filename()].
checked(Files, Planned, Ran) ->
    case get({Ran, said}) =:= true andalso lists:sort(Files) =/= lists:sort(Planned) of
        true ->
            logger:warning("kprof flame: the x-kprof-files header of a traced request named "
                           "~p, but the capture wrote ~p", [Planned, Files]);
        false ->
            ok
    end,
    Files.
