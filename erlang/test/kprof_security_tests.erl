%%% @doc What kprof promises in doc/security.md, checked against a real
%%% second local user: a user is made for the test (useradd) and removed
%%% after, whatever happens; the directories it prepares (its own directory,
%%% its symlink to ours, a directory squatting kprof's default) are refused
%%% with the reason, nothing is written there, and it can neither list kprof's
%%% web directory nor read a profile. Needs root (CI runs as root); without
%%% it the test says SKIPPED, loudly, and passes nothing.
%%%
%%% Also: a relative sink_path is absolute once kprof started (a restart
%%% after file:set_cwd/1 runs the same sink), and kprof_sink makes no atom
%%% from what the sink writes (binary_to_term(_, [safe])).
-module(kprof_security_tests).

-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

-export([do/1]).

%% The handler after kprof_flame_httpd.
do(_ModData) ->
    _ = lists:sort([rand:uniform(100) || _ <- lists:seq(1, 100)]),
    timer:sleep(2),
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, "2"}], "ok"}}]}.

second_user_test_() ->
    {timeout, 120, fun second_user/0}.

second_user() ->
    kprof_test_util:with_second_user(?MODULE, "kprofsec", fun as_second_user/2).

as_second_user(User, Runuser) ->
    {0, UidText} = run(tool(id), ["-u", User]),
    Uid = list_to_integer(string:trim(UidText)),
    As = fun(Exe, Args) -> run(Runuser, ["-u", User, "--", Exe | Args]) end,
    %% A sticky directory anybody may write to, as /tmp is, made by us (root).
    Base = filename:join("/tmp", "kprof-sec-" ++ os:getpid() ++ "-" ++ User),
    ok = file:make_dir(Base),
    {0, _} = run(tool(chmod), ["1777", Base]),
    Old = os:getenv("XDG_CACHE_HOME"),
    ok = kprof_test_util:start(#{}),
    {ok, _} = application:ensure_all_started(inets),
    try
        Theirs = filename:join(Base, "theirs"),
        Ours = filename:join(Base, "ours"),
        Link = filename:join(Base, "link"),
        {0, _} = As(tool(mkdir), [Theirs]),
        ok = file:make_dir(Ours),
        {0, _} = As(tool(ln), ["-s", Ours, Link]),
        Apply = fun(Dir) -> kprof:flame_apply(fun() -> lists:seq(1, 10) end,
                                              #{output_directory => Dir, output_format => folded})
                end,
        %% Their directory, below it, their symlink as it and above it.
        ?assertEqual({error, {output_directory, Theirs, {unsafe_directory, Theirs, {owner, Uid}}}},
                     Apply(Theirs)),
        ?assertEqual({error, {output_directory, Theirs ++ "/sub",
                              {unsafe_directory, Theirs, {owner, Uid}}}},
                     Apply(Theirs ++ "/sub")),
        ?assertEqual({error, {output_directory, Link, {unsafe_directory, Link, symlink}}},
                     Apply(Link)),
        ?assertEqual({error, {output_directory, Link ++ "/x",
                              {unsafe_directory, Link, {owner, Uid}}}},
                     Apply(Link ++ "/x")),
        ?assertEqual({ok, []}, file:list_dir(Theirs)),
        ?assertEqual({ok, []}, file:list_dir(Ours)),
        %% Ours, sticky: taken; ours, open to all and not sticky: refused.
        ?assertMatch({ok, _, [_]}, Apply(Base)),
        Open = filename:join(Base, "open"),
        ok = file:make_dir(Open),
        ok = file:change_mode(Open, 8#777),
        ?assertEqual({error, {output_directory, Open, {unsafe_directory, Open, {writable, "0777"}}}},
                     Apply(Open)),
        web(Base, As)
    after
        _ = application:unset_env(kprof, allow_tracing),
        ok = kprof:stop(),
        _ = case Old of false -> os:unsetenv("XDG_CACHE_HOME"); _ -> os:putenv("XDG_CACHE_HOME", Old) end,
        ok = file:del_dir_r(Base)
    end.

%% The web trigger's default directory: squatted by the other user, refused
%% (and counted); made by kprof, 0700 with 0600 files the other user cannot
%% list or read.
web(Base, As) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
    Root = filename:join(Base, "www"),
    ok = file:make_dir(Root),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_security_tests"},
                                      {server_root, Root}, {document_root, Root},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_flame_httpd, ?MODULE]}]),
    Port = proplists:get_value(port, httpd:info(Httpd)),
    Get = fun() ->
                  {ok, {{_, 200, _}, Hs, "ok"}} =
                      kprof_test_util:http(get, {"http://127.0.0.1:" ++ integer_to_list(Port) ++ "/",
                                                 [{"x-trace-request", "true"}]}, []),
                  Hs
          end,
    try
        Squat = filename:join(Base, "squat"),
        {0, _} = As(tool(mkdir), ["-p", filename:join([Squat, "kprof", "http"])]),
        true = os:putenv("XDG_CACHE_HOME", Squat),
        #{refused := #{output_directory := R0}} = kprof_web_gate:status(),
        H1 = Get(),
        ?assertEqual({"x-kprof-refused", "output_directory"},
                     lists:keyfind("x-kprof-refused", 1, H1)),
        ?assertMatch(#{refused := #{output_directory := R1}} when R1 =:= R0 + 1,
                     kprof_web_gate:status()),
        ?assertEqual({ok, []}, file:list_dir(filename:join([Squat, "kprof", "http"]))),
        Cache = filename:join(Base, "cache"),
        true = os:putenv("XDG_CACHE_HOME", Cache),
        H2 = Get(),
        {_, Names} = lists:keyfind("x-kprof-files", 1, H2),
        Dir = filename:join([Cache, "kprof", "http"]),
        [File | _] = [filename:join(Dir, N) || N <- string:split(Names, ",", all)],
        ?assertEqual(8#700, mode(Dir)),
        ?assertEqual(8#600, mode(File)),
        {ok, _} = file:read_file(File),
        {ListStatus, ListOut} = As(tool(ls), [Dir]),
        ?assertNotEqual(0, ListStatus),
        ?assertNotEqual(nomatch, string:find(ListOut, "ermission denied")),
        {CatStatus, CatOut} = As(tool(cat), [File]),
        ?assertNotEqual(0, CatStatus),
        ?assertNotEqual(nomatch, string:find(CatOut, "ermission denied"))
    after
        inets:stop(httpd, Httpd)
    end.

%% A relative sink_path was kept relative: after file:set_cwd/1 a restart
%% ran whatever that path named from the new directory (here: nothing).
sink_path_absolute_test() ->
    {ok, Cwd} = file:get_cwd(),
    Default = kprof_sink:default_path(),
    %% The sink's path relative to this directory (make and rebar3 run here).
    Rel = string:prefix(Default, Cwd ++ "/"),
    ?assertNotEqual(nomatch, Rel),
    ok = kprof_test_util:start(#{sink_path => Rel}),
    try
        %% A relative code path would not load modules from "/".
        [{module, _} = code:ensure_loaded(M) || M <- [kprof, kprof_sink, kprof_alert]],
        ok = file:set_cwd("/"),
        #{path := Path, os_pid := Pid0} = kprof_sink:info(),
        ?assertEqual(Default, Path),
        ok = kprof_sink:restart(test),
        #{path := Path, os_pid := Pid1} = kprof_sink:info(),
        ?assertNotEqual(Pid0, Pid1),
        ?assertEqual(pong, kprof:sink_ping())
    after
        ok = file:set_cwd(Cwd),
        kprof:stop()
    end.

%% A frame naming an atom the node does not have: dropped, and no atom made.
safe_frames_test() ->
    ok = kprof_test_util:start(#{}),
    try
        Name = list_to_binary("kprof_never_seen_" ++ integer_to_list(erlang:unique_integer([positive]))
                              ++ "_" ++ os:getpid()),
        Frame = <<131, 104, 3, 119, 11, "kprof_alert", 119, (byte_size(Name)), Name/binary,
                  116, 0:32>>,
        {error, _} = catch_badarg(fun() -> binary_to_term(Frame, [safe]) end),
        kprof_sink ! {kprof_sink:port(), {data, Frame}},
        ?assertEqual(pong, kprof:sink_ping()),
        ?assertError(badarg, binary_to_existing_atom(Name, utf8)),
        %% Every atom the sink's sources name exists: its replies all decode.
        ?assert(lists:member(unsafe_directory, kprof_sink:sink_atoms())),
        ?assert(lists:member(enospc, kprof_sink:sink_atoms()))
    after
        kprof:stop()
    end.

%%% Helpers

catch_badarg(F) ->
    try F() of V -> {ok, V} catch error:badarg -> {error, badarg} end.

tool(Name) ->
    kprof_test_util:tool(Name).

run(Exe, Args) ->
    kprof_test_util:run(Exe, Args).

mode(Path) ->
    {ok, #file_info{mode = M}} = file:read_link_info(Path),
    M band 8#7777.
