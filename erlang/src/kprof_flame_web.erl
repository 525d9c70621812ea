%%% @doc A flame graph of one HTTP request, asked for by the request itself.
%%%
%%% A request carrying the header `x-trace-request' is run as
%%% {@link kprof:flame_apply/2} runs a function, in the process that handles it when
%%% {@link kprof_web_gate} lets it: the application environment
%%% `allow_tracing' is `false' by default (nothing is traced); `true' lets
%%% loopback clients ask with `x-trace-request: true'; a map adds a secret
%%% the header must carry, the client networks that may ask, a rate, a time
%%% limit per capture and a disk quota (kprof_web_gate's doc,
%%% doc/security.md). A request that asks and is refused runs as usual and
%%% is counted by reason in `kprof:status()' (`web'); a client the address
%%% check admitted is told why in an `x-kprof-refused' response header.
%%%
%%% The files go to the options' `output_directory', else to a directory
%%% kprof makes for them with mode 0700 ({@link kprof_web_gate:default_dir/0},
%%% `~/.cache/kprof/http'), as 0600 files named
%%% `kprof-http-<microseconds>-<unique>' (folded and SVG by default). The
%%% response names them, by their base names only, in an `x-kprof-files'
%%% header (comma separated): the client learns no server path.
%%%
%%% <ul>
%%% <li>inets httpd: put {@link kprof_flame_httpd} first in `modules'. The
%%%     header is added after the capture has ended and names exactly the
%%%     files it wrote, to a response httpd sends after the chain (`{response,
%%%     {response, Head, Body}}'); a module that sends its response itself
%%%     (mod_get, mod_esi's `deliver') gets no header: its files are only
%%%     logged. No header when nothing was written (refused, no events, a
%%%     failed write).</li>
%%% <li>mochiweb: `Loop = kprof_flame_mochiweb:loop(fun my_app:loop/1, Opts)',
%%%     `mochiweb_http:start([{loop, Loop}, ...])'. mochiweb writes the
%%%     response from inside the loop, before the capture ends, so the loop
%%%     adds the header itself:
%%%     `Req:respond({200, kprof_flame_web:headers() ++ Hs, Body})'.
%%%     `headers()' names the files only once the capture has started (or
%%%     says `x-kprof-refused'), and is `[]' otherwise. The files exist once
%%%     the loop has returned, unless the capture fails at its end (no events,
%%%     a failed write): then none of them does, and a warning says so.</li>
%%% </ul>
%%% `Opts' are flame_apply's; `max_seconds' defaults to the gate's.
%%%
%%% A request that also carries `x-kprof-sample: true' is sampled instead of
%%% traced (on a node started with `+JPperf map'): its process's samples
%%% while it runs, at 997 a second, the same files and headers
%%% ({@link run/3}, {@link kprof_sample:apply/2}; doc/sampling.md). Sampling
%%% costs the request what the rate costs, not what tracing each call does.
%%%
%%% The capture is {@link kprof_flame:apply/2}'s, with the options checked
%%% by {@link kprof_flame_options:validate/2} first: kprof's own modules never call
%%% the facade ({@link kprof}), which is the user's.
-module(kprof_flame_web).

-export([decide/2, run/2, run/3, mode/1, with_refusal/2, headers/0, refusal/0, refused/0]).

-define(HEADER, "x-trace-request").
-define(REPLY_HEADER, "x-kprof-files").
-define(REFUSED_HEADER, "x-kprof-refused").
-define(FILES_KEY, '$kprof_flame_files').

%% @doc What to do with a request whose `x-trace-request' header has this
%% value (`undefined' when absent), from this client (`{Address, Forwarded}':
%% the socket's peer, `undefined' when unknown, and whether the request
%% carries a proxy's forwarding header): `trace', `none' (it did not ask),
%% or `{refused, Reason, Tell}' (counted; see {@link kprof_web_gate}).
-spec decide(undefined | string() | binary(), kprof_web_gate:peer()) ->
          trace | none | {refused, kprof_web_gate:reason(), boolean()}.
decide(Value, Peer) ->
    kprof_web_gate:decide(Value, Peer, kprof_web_gate:config()).

%% @doc Run `Fun' under flame_apply with the files' names decided first, so
%% {@link headers/0} can name them from inside `Fun' once the capture has
%% started. Returns `Fun''s result and the files written (`[]' when the
%% capture was refused or failed; counted). `Fun' runs once either way:
%% untraced, with `headers()' saying `x-kprof-refused', when flame_apply
%% refused to start. After the capture, the oldest kprof files of the
%% directory go until what is left fits the gate's `max_bytes'.
-spec run(fun(() -> Result), kprof_flame:opts()) -> {Result, [file:filename()]}.
run(Fun, Opts) ->
    run(Fun, Opts, trace).

%% @doc {@link run/2} traced (`trace'), or sampled (`sample'): the request's
%% process sampled while `Fun' runs (kprof_sample:apply/2, at 997 samples a
%% second unless `Opts' give a `frequency'; the node needs `+JPperf map'),
%% its files named and pruned alike. `Opts' are flame_apply's: a sampled
%% request takes those sampling takes too (kprof_sample's options), and
%% leaves the others.
-spec run(fun(() -> Result), map(), trace | sample) -> {Result, [file:filename()]}.
run(Fun, Opts0, Mode) when Mode =:= trace; Mode =:= sample ->
    case web_opts(Opts0) of
        {ok, Opts, MaxBytes} -> run(Fun, mode_opts(Mode, Opts), MaxBytes, Mode);
        error -> {refused_run(output_directory, Fun), []}
    end.

%% @doc The mode a request asks for with its `x-kprof-sample' header (its
%% value, `undefined' when absent): `sample' for any value but "", "false"
%% and "0", else `trace'. (Whether it may ask at all is the gate's, on
%% `x-trace-request'.)
-spec mode(undefined | string() | binary()) -> trace | sample.
mode(undefined) ->
    trace;
mode(Value) ->
    case string:lowercase(string:trim(unicode:characters_to_binary(Value))) of
        V when V =:= <<>>; V =:= <<"false">>; V =:= <<"0">> -> trace;
        _ -> sample
    end.

%% @doc Inside a request: `[{"x-kprof-files", BaseNames}]' once its
%% capture has started, `[{"x-kprof-refused", Reason}]' when it asked and
%% was refused (and may be told), `[]' otherwise. The files named exist
%% once the traced function has returned, unless the capture fails at its
%% end (then none of them does, and a warning names them).
-spec headers() -> [{string(), string()}].
headers() ->
    case get(?FILES_KEY) of
        {Files, _} when is_list(Files), Files =/= [] ->
            put(?FILES_KEY, {Files, true}),
            [{?REPLY_HEADER, names(Files)}];
        {refused, Reason} ->
            [{?REFUSED_HEADER, atom_to_list(Reason)}];
        _ ->
            []
    end.

%% @doc Inside a request that asked and was refused after the gate let it
%% through (flame_apply refused to start, no output directory), or that the
%% gate refused and may be told: why. `undefined' otherwise. For a server
%% that adds its headers after the request (kprof_flame_httpd).
-spec refusal() -> kprof_web_gate:reason() | undefined.
refusal() ->
    case get(?FILES_KEY) of
        {refused, Reason} -> Reason;
        _ -> undefined
    end.

%% @doc How many requests asked to be traced and were refused, for any
%% reason (`kprof:status()' has them by reason).
-spec refused() -> non_neg_integer().
refused() ->
    #{refused := ByReason} = kprof_web_gate:status(),
    lists:sum(maps:values(ByReason)).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% A sampled request's options: sampling's of the web options, at 997 a second.
-spec mode_opts(trace | sample, map()) -> map().
mode_opts(trace, Opts) ->
    Opts;
mode_opts(sample, Opts) ->
    Keys = [K || {_, K, _, _, _, _, _, _} <- kprof_opts:rows(sample)],
    maps:merge(#{frequency => 997}, maps:with(Keys, Opts)).

-spec validated(map(), trace | sample) -> {ok, map()} | {error, term()}.
validated(Opts, trace) -> kprof_flame_options:validate(Opts, apply);
validated(Opts, sample) -> kprof_sample:validate(Opts).

-spec captured(fun(() -> term()), map(), trace | sample) -> term().
captured(Traced, Opts, trace) -> kprof_flame:apply(Traced, Opts);
captured(Traced, Opts, sample) -> kprof_sample:apply(Traced, Opts).

-spec run(fun(() -> Result), map(), pos_integer() | infinity, trace | sample) ->
          {Result, [file:filename()]}.
run(Fun, Opts, MaxBytes, Mode) ->
    case validated(Opts, Mode) of
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
            try captured(Traced, Opts, Mode) of
                {ok, Result, Files} ->
                    {Result, written(Files, Planned, Ran, Cfg, MaxBytes)};
                {ok, Result, Files, _Top} ->
                    %% top => N: the table went to this process's group leader.
                    {Result, written(Files, Planned, Ran, Cfg, MaxBytes)};
                {error, {aborted, _Kind, Result, Files}} ->
                    {Result, written(Files, Planned, Ran, Cfg, MaxBytes)};
                {error, Reason} ->
                    _ = checked([], Planned, Ran),
                    Why = case Reason of
                              {output_directory, _, _} -> output_directory;
                              _ -> busy
                          end,
                    case erase(Ran) of
                        {ran, Result} -> _ = kprof_web_gate:refused(Why, true), {Result, []};
                        undefined -> {refused_run(Why, Fun), []}
                    end
            after
                _ = erase(Ran),
                _ = erase({Ran, said})
            end;
        {error, _} ->
            %% mochiweb/2 and kprof_flame_httpd check their options when the
            %% server starts; only a direct caller of run/2 gets here.
            {refused_run(bad_config, Fun), []}
    end.

%% The request's options: flame_apply's, over the web defaults (folded and
%% SVG, no progress lines, the gate's max_seconds, the default directory);
%% error when no directory is given and there is no default (no HOME).
-spec web_opts(map()) -> {ok, map(), pos_integer() | infinity} | error.
web_opts(Opts0) ->
    Gate = case kprof_web_gate:config() of
               {ok, C} when is_map(C) -> C;
               _ -> #{max_seconds => infinity, max_bytes => infinity}
           end,
    Limit = case maps:get(max_seconds, Gate) of
                infinity -> #{};
                S -> #{max_seconds => S}
            end,
    Dir = case Opts0 of
              #{output_directory := D} -> {ok, D};
              _ -> try {ok, kprof_web_gate:default_dir()} catch _:_ -> error end
          end,
    case Dir of
        {ok, D1} ->
            %% Unique across restarts too: the header names the files before they exist.
            Name = lists:flatten(io_lib:format("kprof-http-~b-~b",
                                               [erlang:system_time(microsecond),
                                                erlang:unique_integer([positive])])),
            %% No progress lines: a server's console is nobody's shell.
            Defaults = maps:merge(#{output_format => [folded, svg], progress => false,
                                    output_directory => D1}, Limit),
            {ok, maps:merge(Defaults, Opts0#{name => Name}), maps:get(max_bytes, Gate)};
        error ->
            error
    end.

%% A capture that wrote its files: counted, and the directory pruned to the quota.
written(Files, Planned, Ran, Cfg, MaxBytes) ->
    Checked = checked(Files, Planned, Ran),
    ok = kprof_web_gate:traced(),
    _ = Files =/= [] andalso
        kprof_web_gate:prune(filename:absname(maps:get(output_directory, Cfg)), MaxBytes,
                             [filename:basename(F) || F <- kprof_web_gate:with_meta(Files)]),
    Checked.

%% A refusal after the gate let the request through: counted, and Fun run
%% untraced with headers() saying why.
-spec refused_run(kprof_web_gate:reason(), fun(() -> Result)) -> Result.
refused_run(Why, Fun) ->
    _ = kprof_web_gate:refused(Why, true),
    with_refusal(Why, Fun).

%% @doc Runs `Fun' untraced, headers() saying why (`Reason') when the
%% client may know (kprof_flame_mochiweb, kprof_flame_httpd).
-spec with_refusal(kprof_web_gate:reason(), fun(() -> Result)) -> Result.
with_refusal(Reason, Fun) ->
    Old = put(?FILES_KEY, {refused, Reason}),
    try Fun()
    after restore(Old)
    end.

-spec names([file:filename_all()]) -> string().
names(Files) ->
    lists:flatten(lists:join(",", [unicode:characters_to_list(filename:basename(F))
                                   || F <- Files])).

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
                           "~ts, but the capture wrote ~p", [names(Planned), Files]);
        false ->
            ok
    end,
    Files.
