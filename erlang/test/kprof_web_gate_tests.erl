%%% @doc The gate of the web trigger (kprof_web_gate), over HTTP on
%%% 127.0.0.1 with inets httpd and mochiweb: who may ask (loopback by
%%% default, a proxy's request refused, a network list, a secret compared
%%% in constant time), how often (a token bucket), for how long
%%% (max_seconds), how much stays on disk (max_bytes, the oldest kprof
%%% files first), where the files go by default (a directory kprof makes
%%% 0700, files 0600, named by base name only), every refusal counted by
%%% reason in kprof:status() and logged once; and the call patterns kept
%%% between web captures for keep_patterns_ms, released at once for the
%%% tiers. The configuration's errors, and the CIDR matching, as units.
-module(kprof_web_gate_tests).

-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

-export([do/1, mochi_loop/1, work/0, slow/0]).
-export([log/2]).

-define(SECRET, <<"s3cret-token-of-32-bytes-0123456">>).

%% The httpd module after kprof_flame_httpd: some work, a response left to httpd.
do(_ModData) ->
    case persistent_term:get({?MODULE, slow}, false) of
        false -> work();
        true -> slow()
    end,
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, "5"}], "hello"}}]}.

mochi_loop(Req) ->
    worked = work(),
    mochiweb_request:respond({200, kprof_flame_web:headers() ++
                                  [{"Content-Type", "text/plain"}], "hi"}, Req).

work() ->
    _ = lists:sort([rand:uniform(1000) || _ <- lists:seq(1, 200)]),
    timer:sleep(2),
    worked.

slow() ->
    timer:sleep(2500),
    worked.

%%% Units

config_test() ->
    Set = fun(V) -> ok = application:set_env(kprof, allow_tracing, V),
                    kprof_web_gate:config() end,
    try
        ?assertEqual({ok, off}, Set(false)),
        {ok, Default} = Set(true),
        ?assertMatch(#{rate := {10, 60000}, max_seconds := 10, max_bytes := 104857600,
                       keep_patterns_ms := 1000, secret := undefined, loopback_only := true},
                     Default),
        ?assertMatch({ok, #{secret := ?SECRET, from := [{{10, 0, 0, 0}, 8}, {{0, 0, 0, 0, 0, 0, 0, 1}, 128}]}},
                     Set(#{secret => ?SECRET, from => ["10.0.0.0/8", <<"::1">>]})),
        ?assertMatch({ok, #{rate := {2, 1000}}}, Set([{rate, {2, 1000}}, {rate, {5, 5}}])),
        %% A short secret is an error that does not show it.
        ?assertEqual({error, {bad_option, secret, '<hidden>'}}, Set(#{secret => <<"short">>})),
        ?assertEqual({error, {from, any, "needs a secret"}}, Set(#{from => any})),
        ?assertEqual({error, {bad_option, from, ["10.0.0.0/33"]}}, Set(#{from => ["10.0.0.0/33"]})),
        ?assertEqual({error, {unknown_keys, [tokens]}}, Set(#{tokens => 1})),
        ?assertEqual({error, {bad_value, yes}}, Set(yes)),
        ?assertEqual({error, {bad_option, keep_patterns_ms, -1}}, Set(#{keep_patterns_ms => -1})),
        %% A bad configuration refuses, counted as such, said to loopback only.
        ?assertMatch({refused, bad_config, true},
                     kprof_flame_web:decide("true", {{127, 0, 0, 1}, false})),
        ?assertMatch({refused, bad_config, false},
                     kprof_flame_web:decide("true", {{10, 0, 0, 1}, false}))
    after
        application:unset_env(kprof, allow_tracing)
    end.

decide_test() ->
    Decide = fun(Cfg, V, Peer) -> kprof_web_gate:decide(V, Peer, {ok, Cfg}) end,
    {ok, Loop} = (fun() -> ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
                           C = kprof_web_gate:config(),
                           application:unset_env(kprof, allow_tracing),
                           C end)(),
    L4 = {{127, 0, 0, 1}, false},
    ?assertEqual(none, Decide(Loop, undefined, L4)),
    ?assertEqual(none, Decide(Loop, "false", L4)),
    ?assertEqual(trace, Decide(Loop, " TRUE ", L4)),
    ?assertEqual(trace, Decide(Loop, "true", {{0, 0, 0, 0, 0, 0, 0, 1}, false})),
    %% A dual-stack listener's IPv4 client, ::ffff:127.0.0.1.
    ?assertEqual(trace, Decide(Loop, "true", {{0, 0, 0, 0, 0, 16#ffff, 16#7f00, 1}, false})),
    ?assertEqual({refused, address, false}, Decide(Loop, "true", {{10, 1, 2, 3}, false})),
    ?assertEqual({refused, address, false}, Decide(Loop, "true", {undefined, false})),
    %% Behind a proxy on this host everyone is loopback: refused.
    ?assertEqual({refused, forwarded, true}, Decide(Loop, "true", {{127, 0, 0, 1}, true})),
    ?assertEqual({refused, secret, true}, Decide(Loop, "yes please", L4)),
    Secret = Loop#{secret := ?SECRET, from := [{{10, 0, 0, 0}, 8}], loopback_only := false},
    ?assertEqual(trace, Decide(Secret, ?SECRET, {{10, 9, 9, 9}, true})),
    ?assertEqual({refused, secret, true}, Decide(Secret, "true", {{10, 9, 9, 9}, false})),
    ?assertEqual({refused, secret, true},
                 Decide(Secret, binary:part(?SECRET, 0, 31), {{10, 9, 9, 9}, false})),
    ?assertEqual({refused, address, false}, Decide(Secret, ?SECRET, {{11, 0, 0, 1}, false})),
    ?assertEqual(trace, Decide(Loop#{from := any, loopback_only := false}, "true",
                               {{8, 8, 8, 8}, false})).

%% N captures at once, then one per PerMs / N.
rate_test() ->
    Rate = {3, 600},
    Take = fun() -> kprof_web_gate:decide("true", {{127, 0, 0, 1}, false},
                                          {ok, #{secret => undefined, from => [{{127, 0, 0, 0}, 8}],
                                                 loopback_only => true, rate => Rate,
                                                 max_seconds => 10, max_bytes => infinity,
                                                 keep_patterns_ms => 0}})
           end,
    T0 = erlang:monotonic_time(millisecond),
    First = [Take() || _ <- lists:seq(1, 5)],
    Elapsed = erlang:monotonic_time(millisecond) - T0,
    %% The first three within 200 ms (the refill of one) are taken, then refused.
    case Elapsed < 200 of
        true -> ?assertEqual([trace, trace, trace, {refused, rate, true}, {refused, rate, true}],
                             First);
        false -> ok
    end,
    timer:sleep(250),
    ?assertEqual(trace, Take()).

cidr_test() ->
    ?assert(kprof_web_gate:is_loopback({127, 9, 9, 9})),
    ?assert(kprof_web_gate:is_loopback({0, 0, 0, 0, 0, 0, 0, 1})),
    ?assertNot(kprof_web_gate:is_loopback({128, 0, 0, 1})),
    ?assertNot(kprof_web_gate:is_loopback({0, 0, 0, 0, 0, 0, 0, 2})),
    ?assertNot(kprof_web_gate:is_loopback(undefined)).

%% The oldest kprof files go first; the capture's own and other files stay.
prune_test() ->
    Dir = tmp_dir("prune"),
    try
        Write = fun(Name, Bytes, Age) ->
                        P = filename:join(Dir, Name),
                        ok = file:write_file(P, binary:copy(<<"x">>, Bytes)),
                        ok = file:change_time(P, erlang:localtime_to_universaltime(
                                                   calendar:gregorian_seconds_to_datetime(
                                                     calendar:datetime_to_gregorian_seconds(
                                                       calendar:local_time()) - Age)))
                end,
        Write("kprof-http-1.folded", 100, 300),
        Write("kprof-http-1.svg", 100, 300),
        Write("kprof-http-2.folded", 100, 200),
        Write("notes.txt", 1000, 400),
        Write("kprof-http-3.svg", 100, 0),
        %% A format named by a prefix (kprof_opts:file_name/2) is kprof's too.
        Write("callgrind.out.kprof-http-0", 100, 500),
        Write("callgrind.out.notes", 100, 500),
        ?assertEqual(3, kprof_web_gate:prune(Dir, 250, ["kprof-http-3.svg"])),
        ?assertEqual({ok, ["callgrind.out.notes", "kprof-http-2.folded", "kprof-http-3.svg",
                           "notes.txt"]},
                     sorted(file:list_dir(Dir))),
        %% The capture's own are kept even over the quota.
        ?assertEqual(1, kprof_web_gate:prune(Dir, 1, ["kprof-http-3.svg"])),
        ?assertEqual({ok, ["callgrind.out.notes", "kprof-http-3.svg", "notes.txt"]},
                     sorted(file:list_dir(Dir))),
        ?assertEqual(0, kprof_web_gate:prune(Dir, infinity, []))
    after
        file:del_dir_r(Dir)
    end.

%% Every count has a slot of its own: a refusal of each reason status/0
%% names, a traced request and a pruned file each add one to their own
%% count and to no other.
counts_test() ->
    Reasons = maps:keys(maps:get(refused, kprof_web_gate:status())),
    ?assert(length(Reasons) >= 8),
    Dir = tmp_dir("counts"),
    Prune = fun() ->
                    ok = file:write_file(filename:join(Dir, "kprof-http-1.folded"), <<"a 1\n">>),
                    1 = kprof_web_gate:prune(Dir, 1, [])
            end,
    Bumps = [{{refused, R}, fun() -> kprof_web_gate:refused(R, false) end} || R <- Reasons]
        ++ [{traced, fun kprof_web_gate:traced/0}, {deleted_files, Prune}],
    try
        lists:foreach(fun({Count, Bump}) ->
                              Before = counts(),
                              _ = Bump(),
                              ?assertEqual({Count, maps:update_with(Count, fun(N) -> N + 1 end,
                                                                    Before)},
                                           {Count, counts()})
                      end, Bumps)
    after
        file:del_dir_r(Dir)
    end.

counts() ->
    #{refused := Refused, traced := Traced, deleted_files := Deleted} = kprof_web_gate:status(),
    maps:from_list([{traced, Traced}, {deleted_files, Deleted}
                    | [{{refused, R}, N} || {R, N} <- maps:to_list(Refused)]]).

%%% Over HTTP

http_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [fun(D) -> {Title, {timeout, 120, fun() -> F(D) end}} end
      || {Title, F} <- [{"loopback by default: one header gives a profile, named by base names, "
                         "in kprof's own 0700 directory, files 0600", fun defaults/1},
                        {"a proxy's request, a secret, a network list: refused, counted by "
                         "reason, told only to clients that may ask, logged once",
                         fun refusals/1},
                        {"rate: a token bucket of captures", fun rate/1},
                        {"max_bytes: the oldest kprof files go", fun quota/1},
                        {"max_seconds: a long request's capture stops, its files are written",
                         fun max_seconds/1},
                        {"mochiweb: the same gate, the secret, the refusal header",
                         fun mochiweb/1},
                        {"mod_get answers itself: no header, the files are written",
                         fun mod_get/1},
                        {"the call patterns stay keep_patterns_ms after a web capture; the "
                         "tiers release them at once", fun keep_patterns/1}]]}.

defaults(#{cache := Cache}) ->
    ok = application:set_env(kprof, allow_tracing, true),
    {Httpd, Port} = start_httpd([]),
    try
        {200, H, "hello"} = get(Port, [{"x-trace-request", "true"}]),
        {_, Names} = lists:keyfind("x-kprof-files", 1, H),
        Files = string:split(Names, ",", all),
        ?assertEqual(Files, [filename:basename(F) || F <- Files]),
        Dir = filename:join([Cache, "kprof", "http"]),
        ?assertEqual(Dir, maps:get(output_directory, maps:get(web, kprof:status()))),
        ?assertEqual(8#700, mode(Dir)),
        ?assertEqual([8#600, 8#600], [mode(filename:join(Dir, F)) || F <- Files]),
        {ok, Text} = file:read_file(filename:join(Dir, hd(Files))),
        ?assertNotEqual(nomatch, binary:match(Text, <<"kprof_web_gate_tests:work/0">>)),
        #{web := #{traced := Traced}} = kprof:status(),
        ?assert(Traced >= 1)
    after
        inets:stop(httpd, Httpd)
    end.

refusals(_) ->
    ok = logger:add_handler(?MODULE, ?MODULE, #{level => notice, config => #{pid => self()}}),
    {Httpd, Port} = start_httpd([]),
    try
        R0 = refused(),
        %% Off: counted, this loopback client told.
        {200, H0, _} = get(Port, [{"x-trace-request", "true"}]),
        ?assertEqual({"x-kprof-refused", "off"}, lists:keyfind("x-kprof-refused", 1, H0)),
        ok = application:set_env(kprof, allow_tracing, true),
        %% Through a proxy on this host.
        {200, H1, _} = get(Port, [{"x-trace-request", "true"}, {"x-forwarded-for", "1.2.3.4"}]),
        ?assertEqual({"x-kprof-refused", "forwarded"}, lists:keyfind("x-kprof-refused", 1, H1)),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H1)),
        %% With a secret: `true' is not enough, the secret is.
        ok = application:set_env(kprof, allow_tracing, #{secret => ?SECRET}),
        {200, H2, _} = get(Port, [{"x-trace-request", "true"}]),
        ?assertEqual({"x-kprof-refused", "secret"}, lists:keyfind("x-kprof-refused", 1, H2)),
        {200, H3, _} = get(Port, [{"x-trace-request", binary_to_list(?SECRET)}]),
        ?assertMatch({"x-kprof-files", _}, lists:keyfind("x-kprof-files", 1, H3)),
        %% A network loopback is not in: not traced, and told nothing.
        ok = application:set_env(kprof, allow_tracing, #{from => ["10.0.0.0/8"]}),
        [begin
             {200, H4, _} = get(Port, [{"x-trace-request", "true"}]),
             ?assertEqual(false, lists:keyfind("x-kprof-refused", 1, H4)),
             ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H4))
         end || _ <- [1, 2, 3]],
        R1 = refused(),
        ?assertEqual(#{off => 1, forwarded => 1, secret => 1, address => 3},
                     maps:with([off, forwarded, secret, address],
                               maps:map(fun(K, V) -> V - maps:get(K, R0) end, R1))),
        %% Logged the first time of each reason only (this VM may have had some).
        Logged = drain_logged([]),
        Once = [R || R <- [off, forwarded, secret, address], maps:get(R, R0) =:= 0],
        ?assertEqual(lists:sort(Once),
                     lists:sort([R || R <- [off, forwarded, secret, address],
                                      lists:any(fun(T) -> string:find(T, "(" ++ atom_to_list(R) ++ ")") =/= nomatch end,
                                                Logged)])),
        ?assert(length(Logged) =< 4)
    after
        inets:stop(httpd, Httpd),
        logger:remove_handler(?MODULE)
    end.

rate(_) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => {2, 60000}}),
    {Httpd, Port} = start_httpd([]),
    try
        Hs = [element(2, get(Port, [{"x-trace-request", "true"}])) || _ <- [1, 2, 3]],
        ?assertMatch([{_, _}, {_, _}, false], [lists:keyfind("x-kprof-files", 1, H) || H <- Hs]),
        ?assertEqual({"x-kprof-refused", "rate"}, lists:keyfind("x-kprof-refused", 1, lists:last(Hs)))
    after
        inets:stop(httpd, Httpd)
    end.

quota(#{dir := Dir}) ->
    %% One capture's files are a few KB: 1 byte keeps only the newest capture.
    ok = application:set_env(kprof, allow_tracing, #{max_bytes => 1, rate => infinity}),
    {Httpd, Port} = start_httpd([{kprof_flame_opts, #{output_directory => Dir}}]),
    try
        #{web := #{deleted_files := D0}} = kprof:status(),
        Named = [begin
                     {200, H, _} = get(Port, [{"x-trace-request", "true"}]),
                     {_, V} = lists:keyfind("x-kprof-files", 1, H),
                     lists:sort(string:split(V, ",", all))
                 end || _ <- [1, 2, 3]],
        %% The newest capture's files and its folded file's Base.meta.json.
        Newest = [filename:basename(F)
                  || F <- kprof_web_gate:with_meta([filename:join(Dir, N) || N <- lists:last(Named)])],
        ?assertEqual(length(lists:last(Named)) + 1, length(Newest)),
        ?assertEqual({ok, lists:sort(Newest)}, sorted(file:list_dir(Dir))),
        #{web := #{deleted_files := D1}} = kprof:status(),
        ?assertEqual(2 * length(Newest), D1 - D0)
    after
        inets:stop(httpd, Httpd)
    end.

max_seconds(#{dir := Dir}) ->
    ok = application:set_env(kprof, allow_tracing, #{max_seconds => 1}),
    {Httpd, Port} = start_httpd([{kprof_flame_opts, #{output_directory => Dir}}]),
    try
        persistent_term:put({?MODULE, slow}, true),
        {200, H, _} = get(Port, [{"x-trace-request", "true"}]),
        {_, V} = lists:keyfind("x-kprof-files", 1, H),
        ?assert(lists:all(fun(F) -> filelib:is_regular(filename:join(Dir, F)) end,
                          string:split(V, ",", all))),
        #{aborted := #{kind := limit, message := Msg}} = kprof:status(),
        ?assertNotEqual(nomatch, string:find(Msg, <<"max_seconds">>))
    after
        persistent_term:erase({?MODULE, slow}),
        inets:stop(httpd, Httpd)
    end.

mochiweb(#{dir := Dir}) ->
    ok = application:set_env(kprof, allow_tracing, #{secret => ?SECRET, rate => infinity}),
    Loop = kprof_flame_mochiweb:loop(fun ?MODULE:mochi_loop/1, #{output_directory => Dir}),
    {ok, Server} = mochiweb_http:start([{name, ?MODULE}, {port, 0}, {ip, {127, 0, 0, 1}},
                                        {loop, Loop}]),
    Port = mochiweb_socket_server:get(Server, port),
    try
        {200, H1, "hi"} = get(Port, [{"x-trace-request", "true"}]),
        ?assertEqual({"x-kprof-refused", "secret"}, lists:keyfind("x-kprof-refused", 1, H1)),
        {200, H2, "hi"} = get(Port, [{"x-trace-request", binary_to_list(?SECRET)},
                                     {"x-real-ip", "1.2.3.4"}]),
        %% A secret is given: a proxy's request may ask.
        {_, V} = lists:keyfind("x-kprof-files", 1, H2),
        ?assert(lists:all(fun(F) -> F =:= filename:basename(F) end, string:split(V, ",", all))),
        %% Bad options: said when the loop is made, not at each request.
        ?assertError({bad_options, {unknown_options, [nope]}},
                     kprof_flame_mochiweb:loop(fun ?MODULE:mochi_loop/1, #{nope => 1}))
    after
        mochiweb_http:stop(?MODULE)
    end.

%% mod_get writes the file to the socket itself: the response has left
%% before the capture ends, so it has no header; the files are written.
mod_get(#{dir := Dir}) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity}),
    Root = tmp_dir("docroot"),
    ok = file:write_file(filename:join(Root, "page.html"), <<"<p>static</p>">>),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_web_gate_tests"},
                                      {server_root, Root}, {document_root, Root},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_flame_httpd, mod_alias, mod_get]},
                                      {kprof_flame_opts, #{output_directory => Dir}}]),
    Port = proplists:get_value(port, httpd:info(Httpd)),
    try
        {200, H, "<p>static</p>"} = get(Port, "/page.html", [{"x-trace-request", "true"}]),
        ?assertEqual(false, lists:keyfind("x-kprof-files", 1, H)),
        %% The folded file, the SVG and the folded file's Base.meta.json.
        ok = kprof_test_util:wait_until(fun() -> length(element(2, file:list_dir(Dir))) =:= 3 end,
                                        5000),
        %% Bad kprof_flame_opts stop the server's start, with the reason.
        ?assertMatch({error, _},
                     inets:start(httpd, [{port, 0}, {server_name, "bad"}, {server_root, Root},
                                         {document_root, Root}, {bind_address, {127, 0, 0, 1}},
                                         {modules, [kprof_flame_httpd, mod_get]},
                                         {kprof_flame_opts, #{output_format => gif}}]))
    after
        inets:stop(httpd, Httpd),
        file:del_dir_r(Root)
    end.

keep_patterns(#{dir := Dir}) ->
    Probe = {lists, reverse, 1},
    Traced = fun() -> kprof_test_util:trace_info(Probe, traced) =:= {traced, local} end,
    ok = application:set_env(kprof, allow_tracing, #{keep_patterns_ms => 400, rate => infinity}),
    {Httpd, Port} = start_httpd([{kprof_flame_opts, #{output_directory => Dir}}]),
    try
        {200, _, _} = get(Port, [{"x-trace-request", "true"}]),
        %% Kept after the capture (the response comes after its end)...
        T0 = erlang:monotonic_time(millisecond),
        Kept = Traced(),
        case erlang:monotonic_time(millisecond) - T0 < 300 of
            true -> ?assert(Kept);
            false -> ok   % too slow a machine to tell: the rest still holds
        end,
        %% ... and cleared by the timer.
        ok = kprof_test_util:wait_until(fun() -> not Traced() end, 5000),
        %% The tiers release them at once.
        {200, _, _} = get(Port, [{"x-trace-request", "true"}]),
        ok = kprof:start_tiers([{work, [{?MODULE, work, 0}]}], #{}),
        ?assertNot(Traced()),
        ok = kprof:stop_tiers(),
        %% 0: cleared with the capture.
        ok = application:set_env(kprof, allow_tracing, #{keep_patterns_ms => 0, rate => infinity}),
        {200, _, _} = get(Port, [{"x-trace-request", "true"}]),
        ?assertNot(Traced())
    after
        inets:stop(httpd, Httpd)
    end.

%%% Helpers

setup() ->
    %% The bad options' server start is said at error level: expected here.
    logger:set_handler_config(default, level, emergency),
    Cache = tmp_dir("cache"),
    Old = os:getenv("XDG_CACHE_HOME"),
    true = os:putenv("XDG_CACHE_HOME", Cache),
    ok = kprof_test_util:start(#{}),
    {ok, _} = application:ensure_all_started(inets),
    #{cache => Cache, old => Old, dir => tmp_dir("out")}.

cleanup(#{cache := Cache, old := Old, dir := Dir}) ->
    _ = application:unset_env(kprof, allow_tracing),
    ok = kprof:stop(),
    _ = case Old of false -> os:unsetenv("XDG_CACHE_HOME"); _ -> os:putenv("XDG_CACHE_HOME", Old) end,
    _ = file:del_dir_r(Cache),
    _ = file:del_dir_r(Dir),
    logger:set_handler_config(default, level, all),
    ok.

tmp_dir(What) ->
    Dir = filename:join("/tmp", lists:flatten(io_lib:format("kprof-gate-~s-~s-~b",
                                                            [What, os:getpid(),
                                                             erlang:unique_integer([positive])]))),
    ok = file:make_dir(Dir),
    Dir.

mode(Path) ->
    {ok, #file_info{mode = M}} = file:read_link_info(Path),
    M band 8#7777.

refused() ->
    maps:get(refused, maps:get(web, kprof:status())).

%% The server's root: a directory of the test's cache one, removed with it.
start_httpd(Extra) ->
    Root = filename:join(os:getenv("XDG_CACHE_HOME"), "www"),
    ok = filelib:ensure_path(Root),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_web_gate_tests"},
                                      {server_root, Root}, {document_root, Root},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_flame_httpd, ?MODULE]} | Extra]),
    {Httpd, proplists:get_value(port, httpd:info(Httpd))}.

get(Port, Headers) ->
    get(Port, "/x", Headers).

get(Port, Path, Headers) ->
    Url = "http://127.0.0.1:" ++ integer_to_list(Port) ++ Path,
    {ok, {{_, Code, _}, RespHeaders, Body}} =
        kprof_test_util:http(get, {Url, Headers}, [{timeout, 30000}]),
    {Code, RespHeaders, Body}.

sorted({ok, L}) -> {ok, lists:sort(L)}.

%% A logger handler that sends this process the text of what is logged.
log(#{msg := Msg}, #{config := #{pid := Pid}}) ->
    Text = case Msg of
               {string, S} -> unicode:characters_to_list(S);
               {report, R} -> lists:flatten(io_lib:format("~p", [R]));
               {Format, Args} -> lists:flatten(io_lib:format(Format, Args))
           end,
    Pid ! {logged, Text}.

drain_logged(Acc) ->
    receive
        {logged, T} ->
            case string:find(T, "kprof web trigger") of
                nomatch -> drain_logged(Acc);
                _ -> drain_logged([T | Acc])
            end
    after 200 ->
            lists:reverse(Acc)
    end.
