%%% EUnit: `output_format => callgrind' on real OTP code (erl_scan and
%%% erl_parse of a module's text), written beside the folded file of the same
%%% capture:
%%% - the callgrind file's total (its `totals:' line and the sum of its self
%%%   cost lines) is the folded file's total;
%%% - callgrind_annotate (valgrind's) reads it and gives each function the
%%%   inclusive cost the folded file implies: a process's root function all
%%%   of its lines, any other function the count of each line it is on, once
%%%   per time it is on it (callgrind_annotate sums the inclusive costs of
%%%   the calls into a function, a recursive one's included);
%%% - with `group => all' the processes are merged under one root function.
-module(kprof_callgrind_tests).
-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

-export([work/0, web_loop/1]).

callgrind_test_() ->
    {timeout, 300,
     {setup, fun setup/0, fun cleanup/1,
      fun(Dir) ->
              [{"totals equal the folded file's, and callgrind_annotate gives the folded "
                "file's inclusive costs", {timeout, 120, fun() -> same_costs(Dir, pid) end}},
               {"group => all: one root function for the processes, the same costs",
                {timeout, 120, fun() -> same_costs(Dir, all) end}},
               {"the file is named callgrind.out.Name", fun() -> name(Dir) end},
               {"one HTTP request (mochiweb): its callgrind file, named in x-kprof-files",
                {timeout, 120, fun() -> web(Dir) end}}]
      end}}.

setup() ->
    ok = kprof_test_util:start(#{}),
    work(),   % the code loaded: no error_handler frames
    kprof_test_util:tmp_dir("kprof-callgrind").

cleanup(Dir) ->
    ok = kprof:stop(),
    file:del_dir_r(Dir).

%% Two processes scanning and parsing source text.
work() ->
    Text = source(),
    Self = self(),
    Pid = spawn_link(fun() -> Self ! {self(), parse(Text)} end),
    N = parse(Text),
    receive {Pid, M} -> N + M end.

source() ->
    lists:flatten([io_lib:format("f~b(X) -> case X of {a, B} -> [B, ~b | X]; _ -> ~b end.~n",
                                 [K, K, K]) || K <- lists:seq(1, 300)]).

parse(Text) ->
    {ok, Tokens, _} = erl_scan:string(Text),
    Forms = split(Tokens, []),
    length([F || T <- Forms, {ok, F} <- [erl_parse:parse_form(T)]]).

split([], Acc) -> lists:reverse(Acc);
split(Tokens, Acc) ->
    {Form, [Dot | Rest]} = lists:splitwith(fun(T) -> element(1, T) =/= dot end, Tokens),
    split(Rest, [Form ++ [Dot] | Acc]).

capture(Dir, Name, Group) ->
    {ok, _, Files} = kprof:flame_apply(fun ?MODULE:work/0,
                                       #{output_directory => Dir, name => Name,
                                         output_format => [folded, callgrind], group => Group}),
    [Folded] = [F || F <- Files, lists:suffix(".folded", F)],
    [Callgrind] = [F || F <- Files, lists:prefix("callgrind.out.", filename:basename(F))],
    {Folded, Callgrind}.

same_costs(Dir, Group) ->
    Name = "cg-" ++ atom_to_list(Group),
    {Folded, Callgrind} = capture(Dir, Name, Group),
    Lines = folded_lines(Folded),
    Total = lists:sum([C || {_, C} <- Lines]),
    ?assert(Total > 0),
    {Totals, SelfSum} = callgrind_totals(Callgrind),
    ?assertEqual(Total, Totals),
    ?assertEqual(Total, SelfSum),
    Roots = lists:usort([hd(Frames) || {Frames, _} <- Lines]),
    case Group of
        all -> ?assertMatch([_], Roots), [Root] = Roots,
               ?assertMatch({match, _}, re:run(Root, "^all\\([0-9]+_processes\\)$"));
        pid -> ?assert(length(Roots) >= 2)
    end,
    Want = inclusive(Lines),
    Got = annotate(Callgrind),
    %% Every function with a cost, and nothing else, at the folded file's cost.
    ?assertEqual(lists:sort([{F, C} || {F, C} <- maps:to_list(Want), C > 0]),
                 lists:sort([{F, C} || {F, C} <- maps:to_list(Got), C > 0])),
    ?assert(maps:is_key("erl_parse:parse_form/1", Want)),
    ?assert(maps:is_key("erl_scan:string/1", Want)).

name(Dir) ->
    {_, Callgrind} = capture(Dir, "named", pid),
    ?assertEqual(filename:join(Dir, "callgrind.out.named"), Callgrind),
    {ok, #file_info{mode = Mode}} = file:read_file_info(Callgrind),
    ?assertEqual(8#600, Mode band 8#777).

web_loop(Req) ->
    _ = work(),
    mochiweb_request:respond({200, kprof_flame_web:headers() ++
                                  [{"Content-Type", "text/plain"}], "hi"}, Req).

web(Dir0) ->
    Dir = filename:join(Dir0, "web"),
    Self = self(),
    Name = list_to_atom("kprof_callgrind_tests_" ++
                            integer_to_list(erlang:unique_integer([positive]))),
    Flame = kprof_flame_mochiweb:loop(fun ?MODULE:web_loop/1,
                                        #{output_directory => Dir,
                                          output_format => [folded, callgrind]}),
    Loop = fun(Req) -> try Flame(Req) after Self ! {loop_done, self()} end end,
    Old = application:get_env(kprof, allow_tracing),
    ok = application:set_env(kprof, allow_tracing, true),
    {ok, Server} = mochiweb_http:start([{name, Name}, {port, 0}, {ip, {127, 0, 0, 1}},
                                        {loop, Loop}]),
    try
        Port = mochiweb_socket_server:get(Server, port),
        {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
        ok = gen_tcp:send(S, "GET / HTTP/1.0\r\nHost: 127.0.0.1\r\nx-trace-request: true\r\n\r\n"),
        Reply = recv_all(S, []),
        receive {loop_done, _} -> ok after 60000 -> error(no_loop_done) end,
        {match, [Named]} = re:run(Reply, "x-kprof-files: ([^\r]*)\r",
                                  [{capture, all_but_first, list}, caseless]),
        Names = string:lexemes(Named, ", "),
        [Cg] = [N || N <- Names, lists:prefix("callgrind.out.kprof-http-", N)],
        [Fo] = [N || N <- Names, lists:suffix(".folded", N)],
        ok = wait_file(filename:join(Dir, Cg), 200),
        ok = wait_file(filename:join(Dir, Fo), 200),
        Total = lists:sum([C || {_, C} <- folded_lines(filename:join(Dir, Fo))]),
        ?assertEqual({Total, Total}, callgrind_totals(filename:join(Dir, Cg)))
    after
        mochiweb_http:stop(Name),
        case Old of
            {ok, V} -> application:set_env(kprof, allow_tracing, V);
            undefined -> application:unset_env(kprof, allow_tracing)
        end
    end.

recv_all(S, Acc) ->
    case gen_tcp:recv(S, 0, 30000) of
        {ok, B} -> recv_all(S, [Acc | B]);
        {error, closed} -> gen_tcp:close(S), iolist_to_binary(Acc)
    end.

%% The capture's files come after the response: a file is there once it has
%% content (they are written whole, then closed).
wait_file(File, 0) ->
    error({not_written, File});
wait_file(File, N) ->
    case filelib:file_size(File) of
        0 -> timer:sleep(100), wait_file(File, N - 1);
        _ -> timer:sleep(100), ok
    end.

%% [{Frames, Count}] of a folded file (only "frames count" lines).
folded_lines(File) ->
    {ok, Bin} = file:read_file(File),
    [begin
         [Count, Path] = [lists:reverse(P) || P <- string:split(lists:reverse(L), " ")],
         {string:split(Path, ";", all), list_to_integer(Count)}
     end || L <- string:split(unicode:characters_to_list(Bin), "\n", all), L =/= ""].

%% The folded file's inclusive cost per function, as callgrind_annotate counts it.
inclusive(Lines) ->
    lists:foldl(fun({[Root | Frames], C}, Acc) ->
                        lists:foldl(fun(F, A) -> maps:update_with(F, fun(V) -> V + C end, C, A) end,
                                    Acc, [Root | Frames])
                end, #{}, Lines).

%% The `totals:' line and the sum of the self cost lines (not those after calls=).
callgrind_totals(File) ->
    {ok, Bin} = file:read_file(File),
    Ls = string:split(binary_to_list(Bin), "\n", all),
    [Totals] = [list_to_integer(T) || "totals: " ++ T <- Ls],
    {Totals, self_sum(Ls, false, 0)}.

self_sum([], _, Sum) -> Sum;
self_sum(["calls=" ++ _ | Ls], _, Sum) -> self_sum(Ls, true, Sum);
self_sum(["0 " ++ _ | Ls], true, Sum) -> self_sum(Ls, false, Sum);
self_sum(["0 " ++ C | Ls], false, Sum) -> self_sum(Ls, false, Sum + list_to_integer(C));
self_sum([_ | Ls], After, Sum) -> self_sum(Ls, After, Sum).

%% callgrind_annotate --inclusive=yes's table: #{Function => Cost}.
annotate(File) ->
    Exe = os:find_executable("callgrind_annotate"),
    ?assertNotEqual(false, Exe),   % Debian's valgrind: scripts/deps.sh installs it
    Port = open_port({spawn_executable, Exe},
                     [{args, ["--inclusive=yes", "--threshold=100", "--auto=no", File]}, exit_status,
                      binary, stderr_to_stdout, {line, 65536}]),
    {Out, 0} = collect(Port, []),
    ?assertEqual([], [L || L <- Out, string:find(L, "WARNING") =/= nomatch]),
    maps:from_list([{strip_file(Fn), list_to_integer([D || D <- N, D =/= $,])}
                    || L <- function_table(Out),
                       {match, [N, Fn]} <- [re:run(L, "^\\s*([0-9,]+) \\(\\s*[0-9.]+%\\)\\s+(.+)$",
                                                   [{capture, all_but_first, list}, unicode])],
                       string:find(Fn, "PROGRAM TOTALS") =:= nomatch]).

%% The lines of the table of functions, after its header and its rule.
function_table(Out) ->
    [_Header, _Rule | Rest] = lists:dropwhile(fun(L) -> string:find(L, "file:function") =:= nomatch
                                              end, Out),
    lists:takewhile(fun(L) -> L =/= "" andalso not lists:prefix("---", L) end, Rest).

%% "file:function": the file is the module (or ??? for a process or pseudo frame).
strip_file(FileFn) ->
    [_File, Fn] = string:split(FileFn, ":"),
    Fn.

collect(Port, Acc) ->
    receive
        {Port, {data, {_, L}}} -> collect(Port, [unicode:characters_to_list(L) | Acc]);
        {Port, {exit_status, S}} -> {lists:reverse(Acc), S}
    after 60000 -> error(callgrind_annotate_timeout)
    end.

%% The web captures' quota (kprof_web_gate:prune/3) counts and removes kprof's
%% callgrind files, by their prefix, and leaves other callgrind files alone:
%% over 150 bytes, the two older of the three kprof files go.
prune_test() ->
    Dir = kprof_test_util:tmp_dir("kprof-callgrind-prune"),
    try
        Write = fun(Name, Age) ->
                        P = filename:join(Dir, Name),
                        ok = file:write_file(P, binary:copy(<<"x">>, 100)),
                        Then = calendar:datetime_to_gregorian_seconds(calendar:universal_time()) - Age,
                        ok = file:change_time(P, calendar:gregorian_seconds_to_datetime(Then))
                end,
        Write("callgrind.out.kprof-http-1", 300),
        Write("callgrind.out.valgrind-run", 400),
        Write("kprof-http-2.folded", 200),
        Write("callgrind.out.kprof-http-3", 0),
        ?assertEqual(2, kprof_web_gate:prune(Dir, 150, ["callgrind.out.kprof-http-3"])),
        {ok, Left} = file:list_dir(Dir),
        ?assertEqual(["callgrind.out.kprof-http-3", "callgrind.out.valgrind-run"], lists:sort(Left))
    after
        file:del_dir_r(Dir)
    end.
