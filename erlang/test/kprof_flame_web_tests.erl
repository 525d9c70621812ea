%%% @doc A flame graph of one HTTP request that asks for it: inets httpd
%%% (kprof_httpd_flame) and mochiweb (kprof_flame_web:mochiweb/2), with
%%% `allow_tracing' off (refused, counted) and on (files, named in the
%%% response's x-kprof-files header).
-module(kprof_flame_web_tests).

-include_lib("eunit/include/eunit.hrl").

%% httpd module of the test server, and the work a request does.
-export([do/1, work/0]).

%% The handler: 15 ms of work, then the response left to httpd.
do(_ModData) ->
    work(),
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, "5"}], "hello"}}]}.

work() ->
    timer:sleep(15),
    worked.

web_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [fun(D) -> {Title, {timeout, 60, fun() -> F(D) end}} end
      || {Title, F} <- [{"inets httpd: refused, then traced with the files in a header",
                          fun httpd/1},
                         {"mochiweb: the loop names the files in its response", fun mochiweb/1}]]}.

httpd(Dir) ->
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_flame_web_tests"},
                                      {server_root, Dir}, {document_root, Dir},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_httpd_flame, ?MODULE]},
                                      {kprof_flame_opts, #{output_directory => Dir}}]),
    try
        Port = proplists:get_value(port, httpd:info(Httpd)),
        Url = "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/x",
        Refused0 = kprof_flame_web:refused(),
        {200, H1, "hello"} = get(Url, [{"x-trace-request", "true"}]),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H1)),
        ?assertEqual(Refused0 + 1, kprof_flame_web:refused()),
        ok = application:set_env(kprof, allow_tracing, true),
        {200, H2, "hello"} = get(Url, []),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H2)),
        {200, H3, "hello"} = get(Url, [{"x-trace-request", "true"}]),
        {_, Value} = lists:keyfind("x-kprof-files", 1, H3),
        Files = string:split(Value, ",", all),
        ?assertEqual([".folded", ".svg"], [filename:extension(F) || F <- Files]),
        [Folded | _] = Files,
        {ok, Text} = file:read_file(Folded),
        ?assertNotEqual(nomatch, binary:match(Text, <<"kprof_flame_web_tests:work/0">>)),
        ?assertEqual(Refused0 + 1, kprof_flame_web:refused())
    after
        inets:stop(httpd, Httpd)
    end.

mochiweb(Dir) ->
    Self = self(),
    Loop = fun(Req) ->
                   worked = ?MODULE:work(),
                   Self ! {headers, kprof_flame_web:headers()},
                   mochiweb_request:respond({200, kprof_flame_web:headers() ++
                                                 [{"Content-Type", "text/plain"}], "hi"}, Req)
           end,
    {ok, Server} = mochiweb_http:start([{name, kprof_flame_web_tests}, {port, 0},
                                        {ip, {127, 0, 0, 1}},
                                        {loop, kprof_flame_web:mochiweb(Loop, #{output_directory => Dir})}]),
    try
        Port = mochiweb_socket_server:get(Server, port),
        Url = "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/y",
        {200, H1, "hi"} = get(Url, [{"x-trace-request", "true"}]),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H1)),
        ok = application:set_env(kprof, allow_tracing, true),
        {200, H2, "hi"} = get(Url, [{"x-trace-request", "true"}]),
        {_, Value} = lists:keyfind("x-kprof-files", 1, H2),
        [Folded, Svg] = string:split(Value, ",", all),
        %% The files exist once the loop has returned (the response went before).
        ok = wait_file(Svg, 50),
        {ok, Text} = file:read_file(Folded),
        ?assertNotEqual(nomatch, binary:match(Text, <<"kprof_flame_web_tests:work/0">>))
    after
        mochiweb_http:stop(kprof_flame_web_tests)
    end.

%%% Helpers

setup() ->
    logger:set_handler_config(default, level, error),
    ok = kprof:start(#{}),
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
        httpc:request(get, {Url, Headers}, [{timeout, 30000}], []),
    {Code, RespHeaders, Body}.

wait_file(_File, 0) ->
    timeout;
wait_file(File, N) ->
    case filelib:is_regular(File) of
        true -> ok;
        false -> timer:sleep(20), wait_file(File, N - 1)
    end.
