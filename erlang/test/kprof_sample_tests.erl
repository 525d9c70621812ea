%%% @doc kprof:sample/1,2 against the real sink, in peer nodes started with
%%% `+JPperf map' (the suite's own node has no perf map: it checks the
%%% refusal):
%%%
%%% <ul>
%%% <li>two busy processes doing work in a 3:1 ratio get 3:1 of the samples,
%%%     +- 10 points, each under its own pid;</li>
%%% <li>a module reloaded into the addresses of a purged version: every
%%%     version's function has its samples (named by the map as it was);</li>
%%% <li>compile:file's 30 functions with the most samples rank as perf's do
%%%     (`perf record -g' of the same run): Spearman >= 0.8; SKIPPED loudly
%%%     where perf is missing or not allowed;</li>
%%% <li>the refusals: no perf map, the interpreter, bad options; and, as a
%%%     second user made for the test (root only, else SKIPPED loudly): that
%%%     user samples its own node within the mlock limits, and a sink running
%%%     as that user is refused the root node's threads with the hint.</li>
%%% </ul>
-module(kprof_sample_tests).

-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

%% Run in the peers.
-export([split_run/1, reload_run/1, compile_run/2, spin/1, worker/0, as_user_run/1,
         eacces_run/2, web_run/1, do/1]).
%% For bench/sample_bench.erl: perf's samples by leaf, kprof's rows by leaf, the rank agreement.
-export([perf_leaves/2, leaves_of/1, spearman/3]).
%% For test/record/kprof_sample_recorder.erl: a version of the reloaded module, run.
-export([load/1, spin_version/2]).

-define(HZ, 997).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% Refusals

options_test() ->
    ?assertEqual({error, {badarg, 0}}, kprof:sample(0)),
    ?assertEqual({error, {badarg, x}}, kprof:sample(x, #{})),
    ?assertEqual({error, {bad_option, pid, foo}}, kprof:sample(10, #{pid => foo})),
    ?assertEqual({error, {bad_option, output_format, folded_calls}},
                 kprof:sample(10, #{output_format => folded_calls})),
    ?assertEqual({error, {bad_option, frequency, 0}}, kprof:sample(10, #{frequency => 0})),
    ?assertMatch({error, {unknown_options, [callers]}}, kprof:sample(10, #{callers => true})),
    ?assertEqual({error, {bad_options, [x]}}, kprof:sample(10, [x])).

%% This node runs without +JPperf map.
no_perf_map_test() ->
    case erlang:system_info(emu_flavor) of
        jit -> ?assertEqual({error, {needs_emulator_flag, "+JPperf map"}}, kprof:sample(50));
        emu -> ?assertEqual({error, {not_supported, emu}}, kprof:sample(50))
    end.

%% The interpreter: its refusal as support/3 decides it; and live when this
%% OTP has the emu flavor installed (Debian's has only the JIT).
emu_test() ->
    ?assertEqual({error, {not_supported, emu}}, kprof_sample:support({unix, linux}, emu, true)),
    ?assertEqual({error, {not_supported, {os, {unix, darwin}}}},
                 kprof_sample:support({unix, darwin}, jit, true)),
    ?assertEqual({error, {needs_emulator_flag, "+JPperf map"}},
                 kprof_sample:support({unix, linux}, jit, false)),
    ?assertEqual(ok, kprof_sample:support({unix, linux}, jit, true)),
    Emu = filelib:wildcard(filename:join([code:root_dir(), "erts-*", "bin", "beam.emu.smp"])),
    case Emu of
        [] ->
            io:format(user, "~n*** kprof_sample_tests: SKIPPED: the live emu refusal: this "
                      "OTP has no emu flavor (no ~ts) ***~n",
                      [filename:join([code:root_dir(), "erts-*/bin/beam.emu.smp"])]);
        [_ | _] ->
            with_peer(["-emu_flavor", "emu"], undefined, fun(P) ->
                ?assertEqual({error, {not_supported, emu}}, call(P, kprof, sample, [50]))
            end)
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% A 3:1 split

split_test_() ->
    {timeout, 120, fun() ->
        with_peer([], undefined, fun(P) ->
            {Share, Samples, Info} = call(P, ?MODULE, split_run, [tmp("split")]),
            io:format(user, "~n    3:1 split: ~.1f % of ~b samples to the 3 (~p)~n",
                      [Share, Samples, maps:with([c_only, attributed, lost], Info)]),
            ?assert(Samples >= 300),
            ?assert(Share >= 65.0 andalso Share =< 85.0)
        end)
    end}.

%% Two workers take turns, never at once: A loops 3N times, B N times, for
%% the whole window; the samples of each, by the pid in its root label.
split_run(Dir) ->
    ok = kprof:start(),
    A = spawn(?MODULE, worker, []),
    B = spawn(?MODULE, worker, []),
    Driver = spawn(fun() -> drive(A, B, 300000) end),
    R = kprof:sample(2500, #{frequency => ?HZ, pid => [A, B], output_directory => Dir,
                             output_format => folded, info => true}),
    exit(Driver, kill),
    [exit(W, kill) || W <- [A, B]],
    {ok, [Folded], #{sample := Info}} = R,
    Counts = by_root(Folded),
    CA = maps:get(label_pid(A), Counts, 0),
    CB = maps:get(label_pid(B), Counts, 0),
    {100 * CA / max(1, CA + CB), (CA + CB) * ?HZ div 1000000, Info}.

worker() ->
    receive {work, N, From} -> loop(N), From ! done, worker() end.

loop(0) -> ok;
loop(N) -> loop(N - 1).

drive(A, B, N) ->
    A ! {work, 3 * N, self()},
    receive done -> ok end,
    B ! {work, N, self()},
    receive done -> ok end,
    drive(A, B, N).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% A reload into reused addresses

reload_test_() ->
    {timeout, 120, fun() ->
        with_peer([], undefined, fun(P) ->
            Named = call(P, ?MODULE, reload_run, [tmp("reload")]),
            io:format(user, "~n    reload: samples by version ~p~n", [Named]),
            %% Versions 1, 3, 5 share their function's address, as 2, 4, 6 do.
            [?assert(maps:get(V, Named, 0) >= 10) || V <- lists:seq(1, 6)]
        end)
    end}.

%% Six versions of a module, each loaded after purging the one two before
%% (the JIT gives it that one's addresses) and run 200 ms; the samples of
%% each version's own function.
reload_run(Dir) ->
    ok = kprof:start(),
    Self = self(),
    Runner = spawn(fun() ->
                           receive go -> ok end,
                           [begin load(V), spin_version(V, 200) end || V <- lists:seq(1, 6)],
                           Self ! done
                   end),
    Sampler = spawn(fun() -> Self ! {sampled, kprof:sample(3000, #{frequency => ?HZ,
                                                                  pid => Runner,
                                                                  output_directory => Dir,
                                                                  output_format => folded})}
                    end),
    timer:sleep(300),
    Runner ! go,
    receive done -> ok end,
    {ok, [Folded]} = receive {sampled, R} -> R after 10000 -> exit(Sampler, kill), timeout end,
    {ok, Text} = file:read_file(Folded),
    maps:from_list([{V, count(Text, "rmod:g" ++ integer_to_list(V) ++ "/1")}
                    || V <- lists:seq(1, 6)]).

load(V) ->
    Src = lists:flatten(io_lib:format("-module(rmod).~n-export([g~b/1]).~n"
                                      "g~b(0) -> ok;~ng~b(N) -> g~b(N - 1).~n", [V, V, V, V])),
    {ok, Toks, _} = erl_scan:string(Src),
    Forms = [F || Form <- split_dots(Toks, []), {ok, F} <- [erl_parse:parse_form(Form)]],
    {ok, rmod, Bin} = compile:forms(Forms, []),
    _ = code:purge(rmod),
    {module, rmod} = code:load_binary(rmod, "rmod.erl", Bin).

split_dots([{dot, _} = D | T], Cur) -> [lists:reverse([D | Cur]) | split_dots(T, [])];
split_dots([H | T], Cur) -> split_dots(T, [H | Cur]);
split_dots([], _) -> [].

spin_version(V, Ms) ->
    End = erlang:monotonic_time(millisecond) + Ms,
    F = list_to_atom("g" ++ integer_to_list(V)),
    spin_until(F, End).

spin_until(F, End) ->
    rmod:F(20000),
    case erlang:monotonic_time(millisecond) >= End of
        true -> ok;
        false -> spin_until(F, End)
    end.

spin(N) -> spin(N + 1).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% The web trigger, sampled

web_test_() ->
    {timeout, 120, fun() ->
        with_peer([], undefined, fun(P) ->
            {Headers, Lines} = call(P, ?MODULE, web_run, [tmp("web")]),
            io:format(user, "~n    a sampled request: ~p~n", [Headers]),
            ?assertMatch({_, _}, lists:keyfind("x-kprof-files", 1, Headers)),
            %% The handler's process, its work sampled under it, nobody else's.
            [?assertMatch({L, {match, _}}, {L, re:run(L, "^[^;]*<[0-9.]+>[^;]*;")}) || L <- Lines],
            ?assert(lists:any(fun(L) -> string:find(L, "kprof_sample_tests:do/1") =/= nomatch end,
                              Lines))
        end)
    end}.

%% inets httpd with kprof_flame_httpd first, a request asking to be sampled.
web_run(Dir) ->
    ok = kprof:start(),
    {ok, _} = application:ensure_all_started(inets),
    ok = application:set_env(kprof, allow_tracing, true),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {server_name, "kprof_sample_tests"},
                                      {server_root, Dir}, {document_root, Dir},
                                      {bind_address, {127, 0, 0, 1}},
                                      {modules, [kprof_flame_httpd, ?MODULE]},
                                      {kprof_flame_opts, #{output_directory => Dir}}]),
    Port = proplists:get_value(port, httpd:info(Httpd)),
    {ok, {{_, 200, _}, Hs, "ok"}} =
        kprof_test_util:http(get, {"http://127.0.0.1:" ++ integer_to_list(Port) ++ "/",
                                   [{"x-trace-request", "true"}, {"x-kprof-sample", "true"}]}, []),
    {_, Names} = lists:keyfind("x-kprof-files", 1, Hs),
    [Folded | _] = [filename:join(Dir, N) || N <- string:split(Names, ",", all),
                                             filename:extension(N) =:= ".folded"],
    {ok, Text} = file:read_file(Folded),
    ok = inets:stop(httpd, Httpd),
    {Hs, [binary_to_list(L) || L <- binary:split(Text, <<"\n">>, [global]),
                               L =/= <<>>, binary:first(L) =/= $#]}.

%% The handler after kprof_flame_httpd: 150 ms of work.
do(_ModData) ->
    End = erlang:monotonic_time(millisecond) + 150,
    work(End),
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, "2"}], "ok"}}]}.

work(End) ->
    _ = lists:sort([rand:uniform(1000) || _ <- lists:seq(1, 1000)]),
    case erlang:monotonic_time(millisecond) >= End of
        true -> ok;
        false -> work(End)
    end.

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% Against perf

perf_test_() ->
    {timeout, 300, fun() ->
        case os:find_executable("perf") of
            false ->
                io:format(user, "~n*** kprof_sample_tests: SKIPPED: compile:file against perf: "
                          "no perf on the PATH (Debian: linux-perf) ***~n", []);
            Perf ->
                with_peer([], undefined, fun(P) -> against_perf(P, Perf) end)
        end
    end}.

against_perf(P, Perf) ->
    Dir = tmp("perf"),
    OsPid = call(P, os, getpid, []),
    %% The calibration's beacons before perf starts: in neither profile.
    ok = call(P, kprof, start, []),
    {_, _} = call(P, kprof_sample, layout, []),
    Data = filename:join(Dir, "perf.data"),
    Port = open_port({spawn_executable, Perf},
                     [{args, ["record", "-q", "-g", "-e", "cpu-clock:u", "-F",
                              integer_to_list(?HZ), "-p", OsPid, "-o", Data]},
                      exit_status, stderr_to_stdout, binary]),
    timer:sleep(500),
    Ours = call(P, ?MODULE, compile_run, [Dir, 15000]),
    os:cmd("kill -INT " ++ os_pid_of(Port)),
    Status = receive {Port, {exit_status, S}} -> S after 30000 -> timeout end,
    Theirs = perf_leaves(Perf, Data),
    case {Status, maps:size(Theirs)} of
        {_, 0} ->
            io:format(user, "~n*** kprof_sample_tests: SKIPPED: perf recorded nothing "
                      "(status ~p: not allowed here?) ***~n", [Status]);
        _ ->
            Rho = spearman(Ours, Theirs, 30),
            io:format(user, "~n    compile:file, top 30 against perf record -g: Spearman ~.3f "
                      "(~b and ~b functions)~n", [Rho, maps:size(Ours), maps:size(Theirs)]),
            ?assert(Rho >= 0.8)
    end.

%% compile:file of a large module in a loop for Ms, sampled: self samples
%% per leaf function, as perf names them.
compile_run(Dir, Ms) ->
    ok = kprof:start(),
    Src = filename:join([filename:dirname(filename:dirname(code:which(kprof))), "src",
                         "kprof_tiers.erl"]),
    Input = kprof_real_work:input(compile, Src),
    Loop = spawn(fun() -> compile_loop(Input) end),
    R = kprof:sample(Ms, #{frequency => ?HZ, output_directory => Dir, top => 100000,
                           output_format => folded}),
    exit(Loop, kill),
    {ok, _, Rows} = R,
    leaves_of(Rows).

%% A sampled profile's top rows as samples by leaf, named as perf_leaves/2 names them.
leaves_of(Rows) ->
    lists:foldl(fun(#{mfa := MFA, calls := C}, M) ->
                        maps:update_with(cxx(kprof_names:mfa(MFA, erlang)), fun(N) -> N + C end,
                                         C, M)
                end, #{}, Rows).

compile_loop(Input) ->
    _ = kprof_real_work:run(Input),
    compile_loop(Input).

%% perf's samples by leaf, named as kprof names them: `$M:F/A' (a prologue
%% too) is M:F/A, `$global::x' [JIT]global::x, a C symbol [C]symbol, an
%% address of beam.smp no symbol holds [C]beam.smp.
perf_leaves(Perf, Data) ->
    Out = os:cmd(Perf ++ " script -F ip,sym,dso -i " ++ Data ++ " 2>/dev/null"),
    Leaves = leaf_lines(string:split(Out, "\n", all), true, []),
    lists:foldl(fun(L, M) -> maps:update_with(L, fun(N) -> N + 1 end, 1, M) end, #{}, Leaves).

leaf_lines([], _, Acc) -> Acc;
leaf_lines([L | Rest], First, Acc) ->
    case string:trim(L) of
        "" -> leaf_lines(Rest, true, Acc);
        T when First -> leaf_lines(Rest, false, [perf_name(T) | Acc]);
        _ -> leaf_lines(Rest, false, Acc)
    end.

perf_name(Line) ->
    [_Ip | Rest] = string:split(Line, " "),
    {Sym, Dso} = case string:split(string:trim(Rest), " (", trailing) of
                     [S, D] -> {string:trim(S), string:trim(D, trailing, ")")};
                     [S] -> {string:trim(S), ""}
                 end,
    Base = filename:basename(Dso),
    Bare = hd(string:split(hd(string:split(Sym, "+0x")), "-CodeInfoPrologue")),
    case {Bare, Base} of
        {"$" ++ Name, _} ->
            case string:find(Name, "::") of
                nomatch -> Name;
                _ -> "[JIT]" ++ Name
            end;
        {"[unknown]", "beam.smp"} -> "[C]beam.smp";
        {"[unknown]", _} -> "[unknown]";
        {S2, _} -> cxx("[C]" ++ hd(string:split(S2, "@")))
    end.

%% perf demangles C++ names (asmjit::...), kprof keeps them as the ELF has
%% them (_ZN6asmjit...): both count as one C++ entry here.
cxx("[C]_Z" ++ _) -> "[C++]";
cxx("[C]" ++ S = Name) ->
    case string:find(S, "::") of
        nomatch -> Name;
        _ -> "[C++]"
    end;
cxx(Name) -> Name.

%% Spearman's rho of the two counts over the union of each one's top N: the
%% correlation of their ranks, ties given their mean rank.
spearman(A, B, N) ->
    Top = fun(M) ->
                  [K || {K, _} <- lists:sublist(lists:reverse(lists:keysort(2, maps:to_list(M))), N)]
          end,
    Keys = lists:usort(Top(A) ++ Top(B)),
    RA = ranks([{maps:get(K, A, 0), K} || K <- Keys]),
    RB = ranks([{maps:get(K, B, 0), K} || K <- Keys]),
    pearson([maps:get(K, RA) || K <- Keys], [maps:get(K, RB) || K <- Keys]).

pearson(X, Y) ->
    N = length(X),
    MX = lists:sum(X) / N,
    MY = lists:sum(Y) / N,
    Cov = lists:sum([(A - MX) * (B - MY) || {A, B} <- lists:zip(X, Y)]),
    SX = math:sqrt(lists:sum([(A - MX) * (A - MX) || A <- X])),
    SY = math:sqrt(lists:sum([(B - MY) * (B - MY) || B <- Y])),
    Cov / (SX * SY).

ranks(Pairs) ->
    group_ties(lists:reverse(lists:sort(Pairs)), 1, #{}).

group_ties([], _, Acc) -> Acc;
group_ties([{V, _} | _] = L, At, Acc) ->
    {Same, Rest} = lists:splitwith(fun({W, _}) -> W =:= V end, L),
    N = length(Same),
    group_ties(Rest, At + N, lists:foldl(fun({_, K}, M) -> M#{K => At + (N - 1) / 2} end,
                                         Acc, Same)).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% A second user

second_user_test_() ->
    {timeout, 180, fun second_user/0}.

second_user() ->
    kprof_test_util:with_second_user(?MODULE, "kprofsmp", fun as_second_user/2).

as_second_user(User, Runuser) ->
    %% Its own node: sampled, its rings within what it may lock.
    Dir = filename:join("/tmp", "kprof-sample-" ++ User),
    {0, _} = run(Runuser, ["-u", User, "--", tool(mkdir), "-m", "700", Dir]),
    try
        with_peer([], User, fun(P) ->
            #{sample := S, budget_bytes := Budget} = call(P, ?MODULE, as_user_run, [Dir]),
            io:format(user, "~n    as ~ts: ~b samples, rings ~b bytes (may lock ~b)~n",
                      [User, maps:get(samples, S), maps:get(ring_bytes, S), Budget]),
            ?assert(maps:get(samples, S) > 0),
            ?assert(maps:get(ring_bytes, S) =< Budget)
        end),
        refused_to_user(User, Runuser, Dir)
    after
        _ = file:del_dir_r(Dir)
    end.

refused_to_user(User, Runuser, Dir) ->
    %% A root node whose sink runs as that user: the kernel refuses it the
    %% node's threads, and the refusal says what to change.
    Wrapper = filename:join(tmp("wrap"), "kprof_sink_as_user"),
    Sink = filename:join([filename:dirname(filename:dirname(code:which(kprof))), "priv",
                          "kprof_sink"]),
    ok = file:write_file(Wrapper, ["#!/bin/sh\nexec ", Runuser, " -u ", User, " -- ", Sink,
                                   " \"$@\"\n"]),
    ok = file:change_mode(Wrapper, 8#755),
    with_peer([], undefined, fun(P) ->
        R = call(P, ?MODULE, eacces_run, [Wrapper, Dir]),
        io:format(user, "~n    a root node, its sink as ~ts: ~p~n", [User, R]),
        ?assertMatch({error, {perf_event_open, eacces, _}}, R),
        {error, {_, _, Hint}} = R,
        Fix = "sysctl kernel.perf_event_paranoid=2, or setcap cap_perfmon+ep ",
        ?assertEqual(Fix, lists:sublist(Hint, length(Fix))),
        %% The sink's own path, which is this one or what it links to (rebar3
        %% runs the tests through _build/test/lib/kprof, a link to the tree).
        ?assertEqual(same_file(Sink), same_file(lists:nthtail(length(Fix), Hint)))
    end).

%% A file's identity: its device and inode.
same_file(Path) ->
    {ok, #file_info{major_device = D, inode = I}} = file:read_file_info(Path),
    {D, I}.

as_user_run(Dir) ->
    ok = kprof:start(),
    Spin = spawn(?MODULE, spin, [0]),
    R = kprof:sample(500, #{frequency => ?HZ, output_directory => Dir, output_format => folded,
                            info => true}),
    exit(Spin, kill),
    {ok, [_], #{sample := S}} = R,
    MlockKb = list_to_integer(string:trim(os:cmd("cat /proc/sys/kernel/perf_event_mlock_kb"))),
    Cpus = erlang:system_info(logical_processors_online),
    Memlock = case string:trim(os:cmd("ulimit -l")) of
                  "unlimited" -> 1 bsl 40;
                  Kb -> list_to_integer(Kb) * 1024
              end,
    #{sample => S, budget_bytes => MlockKb * 1024 * Cpus + Memlock}.

eacces_run(Wrapper, Dir) ->
    ok = kprof:start(#{sink_path => Wrapper}),
    kprof:sample(200, #{frequency => ?HZ, output_directory => Dir}).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% Helpers

%% A peer node started with +JPperf map (and Args), as User if given (its
%% map removed after).
with_peer(Args, User, Fun) ->
    Exec = case User of
               undefined -> #{};
               _ -> #{exec => {tool(runuser), ["-u", User, "--", os:find_executable("erl")]}}
           end,
    Started = peer:start_link(maps:merge(#{connection => standard_io, wait_boot => 60000,
                                           args => ["+JPperf", "map" | Args]
                                               ++ kprof_test_util:peer_args(?MODULE)},
                                         Exec)),
    Peer = element(2, Started),
    try
        OsPid = peer:call(Peer, os, getpid, []),
        try
            Fun(Peer)
        after
            _ = file:delete("/tmp/perf-" ++ OsPid ++ ".map")
        end
    after
        peer:stop(Peer)
    end.

call(Peer, M, F, A) ->
    peer:call(Peer, M, F, A, 120000).

tmp(What) ->
    kprof_test_util:tmp_dir("kprof-sample-" ++ What).

%% Folded stacks' counts by the pid of their root label.
by_root(Folded) ->
    {ok, Text} = file:read_file(Folded),
    lists:foldl(fun(Line, M) ->
                        case re:run(Line, "^[^;]*(<[0-9]+\\.[0-9]+\\.[0-9]+>)[^;]*;.* ([0-9]+)$",
                                    [{capture, [1, 2], list}]) of
                            {match, [Pid, N]} ->
                                maps:update_with(Pid, fun(C) -> C + list_to_integer(N) end,
                                                 list_to_integer(N), M);
                            nomatch ->
                                M
                        end
                end, #{}, binary:split(Text, <<"\n">>, [global])).

label_pid(Pid) ->
    pid_to_list(Pid).

%% The samples (in us of self time) of the folded lines whose leaf is Frame.
count(Text, Frame) ->
    Lines = binary:split(Text, <<"\n">>, [global]),
    lists:sum([binary_to_integer(N) || L <- Lines,
                                       {match, [Leaf, N]} <- [re:run(L, "([^;]*) ([0-9]+)$",
                                                                    [{capture, [1, 2], binary}])],
                                       Leaf =:= list_to_binary(Frame)]) * ?HZ div 1000000.

os_pid_of(Port) ->
    {os_pid, P} = erlang:port_info(Port, os_pid),
    integer_to_list(P).

tool(Name) ->
    kprof_test_util:tool(Name).

run(Exe, Args) ->
    kprof_test_util:run(Exe, Args).
