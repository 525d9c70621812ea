%%% @doc A flame graph of one HTTP request that asks for it: inets httpd
%%% (kprof_flame_httpd) and mochiweb (kprof_flame_mochiweb:loop/2), with
%%% `allow_tracing' off (refused, counted, said in x-kprof-refused to this
%%% loopback client) and on (files, named by their base names in the
%%% response's x-kprof-files header). A header names only files that exist
%%% once the request is done: with more traced requests at once than the
%%% sink has captures, with tiers running (flame refuses to start), and on a
%%% full disk (a tmpfs in a mount namespace of its own), where a failed
%%% capture leaves no file either.
-module(kprof_flame_web_tests).

-include_lib("eunit/include/eunit.hrl").

%% httpd module of the test server, the mochiweb loop, and the work a request does.
-export([do/1, mochi_loop/1, work/0]).
%% The logger handler of the full disk test.
-export([log/2]).

-define(BARRIER, {?MODULE, barrier}).
%% Traced requests at once: more than the sink's 32 captures.
-define(AT_ONCE, 50).

%% The handler: 15 ms of work, then the response left to httpd.
do(_ModData) ->
    barrier(),
    work(),
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, "5"}], "hello"}}]}.

%% The mochiweb application: the response from inside the loop, with the header.
mochi_loop(Req) ->
    barrier(),
    worked = work(),
    mochiweb_request:respond({200, kprof_flame_web:headers() ++
                                  [{"Content-Type", "text/plain"}], "hi"}, Req).

work() ->
    timer:sleep(15),
    worked.

web_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [fun(D) -> {Title, {timeout, 120, fun() -> F(D) end}} end
      || {Title, F} <- [{"inets httpd: refused, then traced with the files in a header",
                          fun httpd/1},
                         {"mochiweb: the loop names the files in its response", fun mochiweb/1},
                         {"inets httpd: 50 traced requests at once, more than the sink's "
                          "captures: a header names only files that exist", fun httpd_at_once/1},
                         {"mochiweb: 50 traced requests at once: a header names only files "
                          "that exist once the loop has returned", fun mochiweb_at_once/1},
                         {"tiers running: flame refuses to start, no header names a file",
                          fun tiers_running/1},
                         {"a full disk: enospc and no file left, retries add none; httpd "
                          "sends no header, mochiweb's names files a warning says are not "
                          "written", fun full_disk/1}]]}.

httpd(Dir) ->
    {Httpd, Port} = start_httpd(Dir, Dir),
    try
        Url = "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/x",
        Refused0 = kprof_flame_web:refused(),
        {200, H1, "hello"} = get(Url, [{"x-trace-request", "true"}]),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H1)),
        ?assertEqual({"x-kprof-refused", "off"}, lists:keyfind("x-kprof-refused", 1, H1)),
        ?assertEqual(Refused0 + 1, kprof_flame_web:refused()),
        ok = application:set_env(kprof, allow_tracing, true),
        {200, H2, "hello"} = get(Url, []),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H2)),
        {200, H3, "hello"} = get(Url, [{"x-trace-request", "true"}]),
        {_, Value} = lists:keyfind("x-kprof-files", 1, H3),
        %% Base names: the client learns no server path.
        Files = string:split(Value, ",", all),
        ?assertEqual([".folded", ".svg"], [filename:extension(F) || F <- Files]),
        ?assertEqual(Files, [filename:basename(F) || F <- Files]),
        [Folded | _] = Files,
        {ok, Text} = file:read_file(filename:join(Dir, Folded)),
        ?assertNotEqual(nomatch, binary:match(Text, <<"kprof_flame_web_tests:work/0">>)),
        ?assertEqual(Refused0 + 1, kprof_flame_web:refused())
    after
        inets:stop(httpd, Httpd)
    end.

mochiweb(Dir) ->
    Port = start_mochiweb(Dir),
    try
        Url = "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/y",
        {200, H1, "hi"} = get(Url, [{"x-trace-request", "true"}]),
        ok = loops_done(1),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H1)),
        ?assertEqual({"x-kprof-refused", "off"}, lists:keyfind("x-kprof-refused", 1, H1)),
        ok = application:set_env(kprof, allow_tracing, true),
        {200, H2, "hi"} = get(Url, [{"x-trace-request", "true"}]),
        {_, Value} = lists:keyfind("x-kprof-files", 1, H2),
        [Folded, Svg] = [filename:join(Dir, F) || F <- string:split(Value, ",", all)],
        %% The files exist once the loop has returned (the response went before).
        ok = loops_done(1),
        ?assert(filelib:is_regular(Svg)),
        {ok, Text} = file:read_file(Folded),
        ?assertNotEqual(nomatch, binary:match(Text, <<"kprof_flame_web_tests:work/0">>))
    after
        mochiweb_http:stop(kprof_flame_web_tests)
    end.

%% 50 traced requests held at a barrier until all are in their handler, so
%% that all want a capture at once: the sink has 32, the others are refused
%% and run untraced. Every file named in a header exists, and the directory
%% holds no file that no header names.
httpd_at_once(Dir) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
    {Httpd, Port} = start_httpd(Dir, Dir),
    try
        Answers = at_once(Port, ?AT_ONCE),
        ?assertEqual(lists:duplicate(?AT_ONCE, 200), [Code || {Code, _, _} <- Answers]),
        assert_named_exist(Dir, Answers, some)
    after
        inets:stop(httpd, Httpd)
    end.

mochiweb_at_once(Dir) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
    Port = start_mochiweb(Dir),
    try
        Answers = at_once(Port, ?AT_ONCE),
        %% mochiweb answered from inside the loops: the captures end after.
        ok = loops_done(?AT_ONCE),
        ?assertEqual(lists:duplicate(?AT_ONCE, 200), [Code || {Code, _, _} <- Answers]),
        assert_named_exist(Dir, Answers, some)
    after
        mochiweb_http:stop(kprof_flame_web_tests)
    end.

%% Tier profiling and flame captures cannot run together: every traced
%% request runs untraced, and no response names a file.
tiers_running(Dir) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
    ok = kprof:start_tiers([{work, [{?MODULE, work, 0}]}], #{}),
    {Httpd, HPort} = start_httpd(Dir, Dir),
    MPort = start_mochiweb(Dir),
    try
        ?assertMatch({error, _}, kprof:flame_apply(fun work/0, #{output_directory => Dir})),
        HAnswers = at_once(HPort, 5),
        MAnswers = at_once(MPort, 5),
        ok = loops_done(5),
        ?assertEqual(lists:duplicate(10, 200), [Code || {Code, _, _} <- HAnswers ++ MAnswers]),
        assert_named_exist(Dir, HAnswers ++ MAnswers, none)
    after
        mochiweb_http:stop(kprof_flame_web_tests),
        inets:stop(httpd, Httpd),
        kprof:stop_tiers()
    end.

%% The output directory on a tmpfs that is full: flame_apply says which file
%% and enospc, leaves no file, and a retry adds none; a traced httpd request
%% gets no header; a traced mochiweb request's header names files that are
%% not there, and a warning says so. With room again, the same call writes
%% its files.
full_disk(Dir) ->
    case hold_tmpfs(Dir) of
        {ok, Holder, Full} ->
            try full_disk(Dir, Full)
            after port_close(Holder)
            end;
        {error, Why} ->
            io:format(user, "~nfull_disk: skipped: this machine cannot mount a tmpfs in a "
                      "namespace of its own: ~ts~n", [Why])
    end.

full_disk(Dir, Full) ->
    Filler = filename:join(Full, "filler"),
    ?assertEqual({error, enospc}, file:write_file(Filler, binary:copy(<<"x">>, 1 bsl 20))),
    Opts = #{output_directory => Full, output_format => [folded, svg], name => "full"},
    Failed = fun() ->
                     {error, {write_failed, Path, enospc}} = kprof:flame_apply(fun work/0, Opts),
                     ?assertEqual(filename:join(Full, "full.folded"), unicode:characters_to_list(Path)),
                     ?assertEqual({ok, ["filler"]}, file:list_dir(Full))
             end,
    Failed(),
    Failed(),
    ok = application:set_env(kprof, allow_tracing, true),
    {Httpd, Port} = start_httpd(Dir, Full),
    try
        [{200, Headers, <<"hello">>}] = at_once(Port, 1),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, Headers)),
        ?assertEqual({ok, ["filler"]}, file:list_dir(Full))
    after
        inets:stop(httpd, Httpd)
    end,
    %% mochiweb's response leaves before the capture ends: its header names
    %% the files, none of them is written, and a warning says so.
    ok = logger:add_handler(?MODULE, ?MODULE, #{level => warning, config => #{pid => self()}}),
    MPort = start_mochiweb(Full),
    try
        [{200, MHeaders, <<"hi">>}] = at_once(MPort, 1),
        ok = loops_done(1),
        {_, Named} = lists:keyfind("x-kprof-files", 1, MHeaders),
        ?assertEqual({ok, ["filler"]}, file:list_dir(Full)),
        ok = logged(Named)
    after
        mochiweb_http:stop(kprof_flame_web_tests),
        logger:remove_handler(?MODULE)
    end,
    ok = file:delete(Filler),
    {ok, worked, Files} = kprof:flame_apply(fun work/0, Opts),
    ?assertEqual([filename:join(Full, F) || F <- ["full.folded", "full.svg"]], Files),
    %% And the folded file's Base.meta.json (doc/flame.md, "The formats").
    ?assertEqual({ok, ["full.folded", "full.meta.json", "full.svg"]}, sorted(file:list_dir(Full))).

%%% Helpers

setup() ->
    logger:set_handler_config(default, level, error),
    ok = kprof_test_util:start(#{}),
    {ok, _} = application:ensure_all_started(inets),
    Dir = filename:join("/tmp", lists:flatten(io_lib:format("kprof-flame-web-~s-~b",
                                                            [os:getpid(), erlang:unique_integer([positive])]))),
    ok = filelib:ensure_path(Dir),
    Dir.

cleanup(Dir) ->
    _ = application:unset_env(kprof, allow_tracing),
    ok = kprof:stop(),
    _ = file:del_dir_r(Dir),
    logger:set_handler_config(default, level, all),
    ok.

get(Url, Headers) ->
    {ok, {{_, Code, _}, RespHeaders, Body}} =
        kprof_test_util:http(get, {Url, Headers}, [{timeout, 30000}]),
    {Code, RespHeaders, Body}.

start_httpd(Root, OutDir) ->
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_flame_web_tests"},
                                      {server_root, Root}, {document_root, Root},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_flame_httpd, ?MODULE]},
                                      {kprof_flame_opts, #{output_directory => OutDir}}]),
    {Httpd, proplists:get_value(port, httpd:info(Httpd))}.

%% A mochiweb server whose loop tells this process when it has returned
%% ({loop_done, Pid}): the files of a traced request exist from then on.
start_mochiweb(Dir) ->
    Self = self(),
    Flame = kprof_flame_mochiweb:loop(fun ?MODULE:mochi_loop/1, #{output_directory => Dir}),
    Loop = fun(Req) -> try Flame(Req) after Self ! {loop_done, self()} end end,
    {ok, Server} = mochiweb_http:start([{name, kprof_flame_web_tests}, {port, 0},
                                        {ip, {127, 0, 0, 1}}, {loop, Loop}]),
    mochiweb_socket_server:get(Server, port).

loops_done(0) ->
    ok;
loops_done(N) ->
    receive {loop_done, _} -> loops_done(N - 1) end.

%% N traced requests, each from a process of its own, held in their handlers
%% until all N are there: [{Code, Headers, Body}] once all are answered.
at_once(Port, N) ->
    Self = self(),
    Barrier = spawn_link(fun() -> barrier_loop(N, []) end),
    persistent_term:put(?BARRIER, Barrier),
    try
        Pids = [spawn_link(fun() -> Self ! {self(), raw_get(Port, I)} end)
                || I <- lists:seq(1, N)],
        [receive {P, Answer} -> Answer end || P <- Pids]
    after
        persistent_term:erase(?BARRIER),
        unlink(Barrier),
        exit(Barrier, kill)
    end.

barrier() ->
    case persistent_term:get(?BARRIER, undefined) of
        undefined -> ok;
        Barrier -> Barrier ! {arrived, self()}, receive {Barrier, go} -> ok end
    end.

barrier_loop(0, Waiting) ->
    [P ! {self(), go} || P <- Waiting],
    receive stop -> ok end;
barrier_loop(N, Waiting) ->
    receive {arrived, P} -> barrier_loop(N - 1, [P | Waiting]) end.

%% GET /I over HTTP/1.0 (the server closes when done), asking to be traced.
raw_get(Port, I) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S, ["GET /", integer_to_list(I), " HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                          "x-trace-request: true\r\n\r\n"]),
    [Head, Body] = binary:split(recv_all(S, []), <<"\r\n\r\n">>),
    [Status | Lines] = binary:split(Head, <<"\r\n">>, [global]),
    [_, Code | _] = binary:split(Status, <<" ">>, [global]),
    Headers = [{string:lowercase(binary_to_list(K)), string:trim(binary_to_list(V))}
               || L <- Lines, [K, V] <- [binary:split(L, <<":">>)]],
    {binary_to_integer(Code), Headers, Body}.

recv_all(S, Acc) ->
    case gen_tcp:recv(S, 0) of
        {ok, B} -> recv_all(S, [Acc | B]);
        {error, closed} -> gen_tcp:close(S), iolist_to_binary(Acc)
    end.

%% Every name in an x-kprof-files header (a base name) is a file of Dir,
%% and Dir holds exactly those. `some': some responses have the header and
%% the others say `x-kprof-refused: busy' (more requests than captures);
%% `none': none has it, all say busy.
assert_named_exist(Dir, Answers, Expect) ->
    Named = [string:split(V, ",", all) || {_, Hs, _} <- Answers,
                                          {"x-kprof-files", V} <- Hs],
    Names = lists:append(Named),
    ?assertEqual(Names, [filename:basename(N) || N <- Names]),
    ?assertEqual([], [N || N <- Names, not filelib:is_regular(filename:join(Dir, N))]),
    {ok, InDir} = file:list_dir(Dir),
    %% With each folded file, its Base.meta.json, which the header does not name.
    WithMeta = [filename:basename(F)
                || F <- kprof_web_gate:with_meta([filename:join(Dir, N) || N <- Names])],
    ?assertEqual(length([N || N <- Names, lists:suffix(".folded", N)]),
                 length(WithMeta) - length(Names)),
    ?assertEqual(lists:sort(InDir), lists:sort(WithMeta)),
    Busy = [R || {_, Hs, _} <- Answers, {"x-kprof-refused", R} <- Hs],
    ?assertEqual([], [R || R <- Busy, R =/= "busy"]),
    ?assertEqual(length(Answers), length(Named) + length(Busy)),
    case Expect of
        some ->
            ?assert(length(Named) > 0),
            ?assert(length(Named) < length(Answers));
        none ->
            ?assertEqual([], Named)
    end.

sorted({ok, L}) -> {ok, lists:sort(L)}.

%% A logger handler (log/2) that sends this process what is logged.
log(#{msg := Msg}, #{config := #{pid := Pid}}) ->
    Pid ! {logged, Msg}.

%% Waits for the warning that names every path of Named (comma separated).
logged(Named) ->
    receive
        {logged, {Format, Args}} when is_list(Format) ->
            Text = lists:flatten(io_lib:format(Format, Args)),
            case lists:all(fun(P) -> string:find(Text, P) =/= nomatch end,
                           string:split(Named, ",", all)) of
                true -> ok;
                false -> logged(Named)
            end;
        {logged, _} ->
            logged(Named)
    end.

%% A tmpfs of 256 KiB on Dir in a mount namespace of its own, held by a
%% process until its port closes; this node reaches it at /proc/PID/root/Dir.
%% As root a mount namespace; otherwise a user namespace too.
hold_tmpfs(Dir) ->
    Unshare = os:find_executable("unshare"),
    Ns = case os:cmd("id -u") of
             "0\n" -> ["--mount"];
             _ -> ["--user", "--map-root-user", "--mount"]
         end,
    Script = "mount -t tmpfs -o size=256k,mode=0700 tmpfs \"$1\" && echo \"ready $$\" "
             "&& exec cat >/dev/null",
    case Unshare of
        false ->
            {error, "no unshare(1) on the PATH"};
        _ ->
            Port = open_port({spawn_executable, Unshare},
                             [{args, Ns ++ ["--propagation", "private", "sh", "-c", Script,
                                            "sh", Dir]},
                              {line, 1024}, stderr_to_stdout, exit_status]),
            holder_ready(Port, Dir, [])
    end.

holder_ready(Port, Dir, Said) ->
    receive
        {Port, {data, {eol, "ready " ++ Pid}}} ->
            {ok, Port, "/proc/" ++ Pid ++ "/root" ++ Dir};
        {Port, {data, {_, Line}}} ->
            holder_ready(Port, Dir, [Line | Said]);
        {Port, {exit_status, S}} ->
            {error, io_lib:format("unshare exited with ~b: ~ts", [S, lists:reverse(Said)])}
    end.
