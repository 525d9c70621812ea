%%% @doc End-to-end tests of the tiers' full trace (option `full_trace'):
%%% a known call tree (kprof_full_trace_work) run under kprof:request with
%%% one identity selected and one not, against the real sink. Call counts
%%% are checked exactly; times only against what the test itself measured
%%% around each request (plus 2 ms), and against the sleeps the code makes
%%% (the machine may be loaded: nothing nominal is asserted). Also
%%% `open => speedscope' with a fake speedscope CLI on the PATH, and the
%%% full trace's patterns put back by kprof_guard after a code reload.
-module(kprof_full_trace_tests).

-include_lib("eunit/include/eunit.hrl").
-import(kprof_test_util, [wait_until/2, reload/1]).

-define(W, kprof_full_trace_work).
-define(N, 3).

%% Bad calls on purpose.
-dialyzer({nowarn_function, [bad_options/0]}).

%% The logger handler of open_no_speedscope/0.
-export([log/2]).

-spec full_trace_test_() -> term().
full_trace_test_() ->
    {foreach, fun setup/0, fun cleanup/1,
     [{Title, {timeout, 120, Test}} || {Title, Test} <- tests()]}.

-spec tests() -> [{string(), fun(() -> term())}].
tests() ->
    [{"per-MFA calls and times, folded paths, unselected identity untouched",
      fun known_tree/0},
     {"tier times are those of a run without full trace", fun tiers_unchanged/0},
     {"bad options are refused and change nothing", fun bad_options/0},
     {"open => speedscope with the CLI on the PATH", fun open_speedscope/0},
     {"open => speedscope without the CLI: files, and a hint", fun open_no_speedscope/0},
     {"code reload of a full-traced module: its patterns are put back, counted",
      fun reload_reapplied/0},
     {"guard: a module pattern reloaded without its sentinel gets a new one",
      fun module_pattern_new_sentinel/0}].

%%% The known tree

-spec known_tree() -> term().
known_tree() ->
    Srv = ?W:start(),
    %% Modules loaded after start_tiers are not traced.
    {module, timer} = code:ensure_loaded(timer),
    T0 = erlang:monotonic_time(microsecond),
    ok = kprof:start_tiers([{work, [{?W, work, 1}]}], #{full_trace => selected}),
    StartUs = erlang:monotonic_time(microsecond) - T0,
    ?debugFmt("start_tiers with full_trace took ~b ms", [StartUs div 1000]),
    Measured = [measure(fun() -> kprof:request(selected, fun() -> ?W:run(Srv) end) end)
                || _ <- lists:seq(1, ?N)],
    Other = [measure(fun() -> kprof:request(other, fun() -> ?W:run(Srv) end) end)
             || _ <- lists:seq(1, ?N)],
    ?assert(lists:all(fun({{3, ok}, _}) -> true; (_) -> false end, Measured ++ Other)),
    Wall = lists:sum([Us || {_, Us} <- Measured]) / 1000,   % ms
    {ok, R} = kprof:report(#{format => term}),
    #{full_trace := #{identities := Ids}} = R,
    ?assertEqual([selected], [Id || #{identity := Id} <- Ids]),
    [#{requests := ?N, mfas := Mfas, total := Total}] = Ids,
    Get = fun(F, A) ->
                  case [M || M = #{mfa := {?W, F1, A1}} <- Mfas, F1 =:= F, A1 =:= A] of
                      [M] -> M;
                      [] -> error({no_mfa, F, A, Mfas})
                  end
          end,
    Calls = [{F, maps:get(calls, Get(F, A))} || {F, A} <- [{run, 1}, {top, 1}, {body, 1},
                                                           {leaf, 1}, {tail, 1}, {rec, 1},
                                                           {handle_call, 3}, {work, 1}]],
    ?assertEqual([{run, ?N}, {top, ?N}, {body, ?N}, {leaf, ?N}, {tail, ?N}, {rec, 4 * ?N},
                  {handle_call, ?N}, {work, ?N}], Calls),
    Slack = 2 * ?N,
    %% Inclusive: at least the sleeps under the function, at most the wall
    %% time measured around the requests; self at most inclusive.
    #{inclusive := RunIncl} = Get(run, 1),
    ?assert(RunIncl >= (1 + 1 + 5) * ?N),
    ?assert(RunIncl =< Wall + Slack),
    #{inclusive := WorkIncl, self := WorkSelf} = Get(work, 1),
    ?assert(WorkIncl >= 5 * ?N),
    ?assert(WorkIncl =< Wall + Slack),
    ?assert(WorkSelf =< WorkIncl),
    #{inclusive := HcIncl} = Get(handle_call, 3),
    ?assert(HcIncl >= WorkIncl),
    ?assert(HcIncl =< Wall + Slack),
    %% rec recurses: its inclusive time is the outermost call's, once.
    #{inclusive := RecIncl} = Get(rec, 1),
    ?assert(RecIncl >= 1 * ?N),
    ?assert(RecIncl =< RunIncl),
    ?assert(lists:all(fun(#{self := S, inclusive := I}) -> S =< I + 0.001 end, Mfas)),
    %% Two processes were timed: at most twice the wall time.
    ?assert(Total =< 2 * (Wall + Slack)),
    %% The text report has the table.
    Text = lists:flatten(io_lib:format("~ts", [capture_text()])),
    ?assertNotEqual(nomatch, string:find(Text, "full trace: 1 identities")),
    ?assertNotEqual(nomatch, string:find(Text, "kprof_full_trace_work:run/1")),
    %% names => elixir: the same functions as Elixir names them.
    {ok, Ex} = kprof:report(#{format => string, names => elixir}),
    ?assertNotEqual(nomatch, string:find(Ex, ":kprof_full_trace_work.run/1")),
    ?assertEqual(nomatch, string:find(Ex, "kprof_full_trace_work:run/1")),
    %% A flame graph per identity: the folded file's paths.
    Dir = tmp_dir(),
    {ok, [{selected, Files}]} = kprof:full_trace_flame(all, #{output_directory => Dir}),
    ?assertEqual(length(kprof_opts:all_formats()), length(Files)),
    [Folded] = [F || F <- Files, lists:suffix(".folded", F)],
    {ok, Bin} = file:read_file(Folded),
    Lines = string:split(Bin, "\n", all),
    W = "kprof_full_trace_work:",
    Has = fun(Path) ->
                  P = unicode:characters_to_binary(lists:join(";", Path)),
                  lists:any(fun(L) -> binary:match(L, P) =/= nomatch end, Lines)
          end,
    ?assert(Has([W ++ "run/1", W ++ "top/1", W ++ "body/1", W ++ "leaf/1", "timer:sleep/1"])),
    ?assert(Has([W ++ "run/1", W ++ "rec/1", W ++ "rec/1", W ++ "rec/1", W ++ "rec/1",
                 "timer:sleep/1"])),
    ?assert(Has([W ++ "handle_call/3", W ++ "work/1", "timer:sleep/1"])),
    ?assertNot(Has([W ++ "tail/1", W ++ "rec/1"])),      % tail calls replace their caller
    %% Again, one format: the files already there are not written over.
    {ok, [{selected, [Svg]}]} = kprof:full_trace_flame(selected, #{output_directory => Dir,
                                                                   output_format => svg}),
    %% (A name of its own: "-1" added when the second is the same as the
    %% first call's, a new time stamp otherwise.)
    ?assertNot(lists:member(Svg, Files)),
    ?assert(filelib:is_regular(Svg)),
    %% And callgrind, as every flame mode writes it.
    {ok, [{selected, [Cg]}]} = kprof:full_trace_flame(selected, #{output_directory => Dir,
                                                                  output_format => callgrind}),
    ?assertMatch("callgrind.out." ++ _, filename:basename(Cg)),
    {ok, CgText} = file:read_file(Cg),
    ?assertNotEqual(nomatch, binary:match(CgText, <<"cfn=">>)),
    [?assert(filelib:is_regular(F)) || F <- Files],
    %% The unselected identity has none.
    ?assertEqual({error, {no_full_trace, other}},
                 kprof:full_trace_flame(other, #{output_directory => Dir})),
    ok = kprof:stop_tiers(),
    ?W:stop(Srv),
    ?debugFmt("per request: ~b us with full trace, ~b us without (identity not selected)",
              [lists:sum([Us || {_, Us} <- Measured]) div ?N,
               lists:sum([Us || {_, Us} <- Other]) div ?N]).

%% The same requests, full trace on and off: the tier's calls alike, its
%% time within what was measured.
-spec tiers_unchanged() -> term().
tiers_unchanged() ->
    Srv = ?W:start(),
    Tiers = [{work, [{?W, work, 1}]}, {tree, [{?W, top, 1}]}],
    Run = fun(Opts) ->
                  ok = kprof:start_tiers(Tiers, Opts),
                  Ms = [measure(fun() -> kprof:request(x, fun() -> ?W:run(Srv) end) end)
                        || _ <- lists:seq(1, ?N)],
                  {ok, #{rows := [#{tiers := Cols}]}} = kprof:report(#{format => term}),
                  ok = kprof:stop_tiers(),
                  {[{T, C, maps:get(mean, Self)} || #{tier := T, calls := C, self := Self} <- Cols],
                   lists:max([Us || {_, Us} <- Ms]) / 1000}
          end,
    {Plain, _} = Run(#{}),
    {Full, MaxMs} = Run(#{full_trace => x}),
    ?assertEqual([{work, ?N}, {tree, ?N}], [{T, C} || {T, C, _} <- Plain]),
    ?assertEqual([{T, C} || {T, C, _} <- Plain], [{T, C} || {T, C, _} <- Full]),
    [{work, _, WorkMs}, {tree, _, TreeMs}] = Full,
    ?assert(WorkMs >= 5 andalso WorkMs =< MaxMs + 2),
    ?assert(TreeMs >= 2 andalso TreeMs =< MaxMs + 2),
    ?W:stop(Srv).

-spec bad_options() -> term().
bad_options() ->
    T = [{work, [{?W, work, 1}]}],
    [?assertEqual({error, {bad_option, full_trace, V}},
                  kprof:start_tiers(T, #{full_trace => V}))
     || V <- [[], true, [a | b]]],
    ?assertEqual({error, {bad_option, full_trace_max_nodes, 3}},
                 kprof:start_tiers(T, #{full_trace => all, full_trace_max_nodes => 3})),
    ?assertEqual(#{active => false}, maps:with([active], kprof_tiers:info())),
    ?assertEqual({error, not_started}, kprof:full_trace_flame(all, #{})),
    ok = kprof:start_tiers(T, #{}),
    ?assertEqual({error, full_trace_off}, kprof:full_trace_flame(all, #{})),
    ?assertEqual({error, {unknown_options, [sleep]}},
                 kprof:full_trace_flame(all, #{sleep => false})),
    ?assertEqual({error, {bad_option, output_format, png}},
                 kprof:full_trace_flame(all, #{output_format => png})),
    ?assertEqual({error, {bad_options, nope}}, kprof:full_trace_flame(all, nope)),
    {ok, #{full_trace := undefined}} = kprof:report(#{format => term}),
    ok = kprof:stop_tiers().

%%% Code reload

%% The work module reloaded while full-traced: the guard puts its patterns
%% back (module-wide, then the tier pattern on work/1), the requests after
%% it are full-traced again, and the report counts the reload.
-spec reload_reapplied() -> term().
reload_reapplied() ->
    Srv = ?W:start(),
    ok = kprof:start_tiers([{work, [{?W, work, 1}]}], #{full_trace => selected}),
    Leaf = {?W, leaf, 1},                % full trace's pattern only
    {traced, local} = kprof_test_util:trace_info(Leaf, traced),
    {match_spec, MS} = kprof_test_util:trace_info(Leaf, match_spec),
    {match_spec, WorkMS} = kprof_test_util:trace_info({?W, work, 1}, match_spec),
    reload(?W),
    %% The reload dropped them (unless the guard, which looks once a
    %% second, put them back already: then it counted it).
    Dropped = [kprof_test_util:trace_info(MFA, traced) || MFA <- [Leaf, {?W, work, 1}]],
    ?assert(Dropped =:= [{traced, false}, {traced, false}]
            orelse maps:get(reapplied, kprof_tiers:info()) >= 1),
    Back = fun() -> [kprof_test_util:trace_info(MFA, traced) || {F, A} <- ?W:module_info(functions),
                                                        MFA <- [{?W, F, A}]] end,
    ok = wait_until(fun() -> lists:all(fun(T) -> T =:= {traced, local} end, Back()) end,
                    20000),
    ?assertEqual({match_spec, MS}, kprof_test_util:trace_info(Leaf, match_spec)),
    ?assertEqual({match_spec, WorkMS}, kprof_test_util:trace_info({?W, work, 1}, match_spec)),
    [{{3, ok}, _} = measure(fun() -> kprof:request(selected, fun() -> ?W:run(Srv) end) end)
     || _ <- lists:seq(1, ?N)],
    {ok, R} = kprof:report(#{format => term}),
    #{full_trace := #{identities := [#{identity := selected, requests := ?N, mfas := Mfas}]},
      rows := Rows} = R,
    Calls = lists:sort([{F, C} || #{mfa := {?W, F, _}, calls := C} <- Mfas]),
    ?assertEqual([{body, ?N}, {handle_call, ?N}, {leaf, ?N}, {rec, 4 * ?N}, {run, ?N},
                  {tail, ?N}, {top, ?N}, {work, ?N}], Calls),
    %% The tier's calls too.
    ?assertEqual([?N], [C || #{tiers := Cols} <- Rows, #{tier := work, calls := C} <- Cols]),
    %% The module (and the tier pattern on work/1) put back: counted.
    {ok, #{reapplied := N}} = kprof_tiers:node_report(),
    ?assert(N >= 1),
    ?assertEqual(N, maps:get(reapplied, R)),
    Text = lists:flatten(io_lib:format("~ts", [kprof_report_render:text(R, #{})])),
    ?assertNotEqual(nomatch, string:find(Text, "trace patterns put back after code reload")),
    ok = kprof:stop_tiers(),
    %% Stopped: nothing left on the module, and the guard puts nothing back.
    {traced, false} = kprof_test_util:trace_info(Leaf, traced),
    timer:sleep(1500),
    {traced, false} = kprof_test_util:trace_info(Leaf, traced),
    ?W:stop(Srv).

%% kprof_guard's `{module, ...}' pattern on a module whose new version has
%% lost the sentinel function: put back on the new functions, with a new
%% sentinel (the guard does not put it back again and again).
-spec module_pattern_new_sentinel() -> term().
module_pattern_new_sentinel() ->
    M = kprof_ft_dyn,
    load_dyn(M, [a, b]),
    Legacy = kprof_trace_session:legacy_api(),
    P = {module, M, true, [local], {M, a, 0}} = kprof_guard_reload:module_pattern(Legacy, M, true, [local]),
    %% The guard's overload bounds are off, and an abort is told: on a
    %% loaded machine a slow probe of the sink's port (max_lag_ms) aborted
    %% the mode, which disarmed it, and the reload was never looked at.
    Self = self(),
    Limits = maps:merge(kprof_guard:default_limits(),
                        #{max_lag_ms => infinity, max_stall_ms => infinity,
                          max_queue_bytes => infinity, max_memory_bytes => infinity}),
    ok = kprof_guard:arm(ft_test, #{abort => fun(Kind, Info) -> Self ! {ft_aborted, Kind, Info} end,
                                    patterns => [P], limits => Limits}),
    try
        #{reapplied := N0} = kprof_guard:status(),
        load_dyn(M, [b, c]),
        {traced, false} = erlang:trace_info({M, c, 0}, traced),
        ok = traced_again({M, c, 0}),
        {traced, local} = erlang:trace_info({M, b, 0}, traced),
        #{reapplied := N1} = kprof_guard:status(),
        ?assertEqual(N0 + 1, N1),
        %% Over two checks: nothing more to put back.
        timer:sleep(2500),
        ?assertMatch(#{reapplied := N1}, kprof_guard:status()),
        %% And the next reload is seen on the new sentinel.
        load_dyn(M, [b, c]),
        ok = traced_again({M, b, 0}),
        ?assertMatch(#{reapplied := N2} when N2 =:= N1 + 1, kprof_guard:status())
    after
        ok = kprof_guard:disarm(ft_test),
        _ = erlang:trace_pattern({M, '_', '_'}, false, [local]),
        _ = code:purge(M),
        _ = code:delete(M),
        _ = code:purge(M)
    end.

%% MFA is local-traced again within 20 s; else the guard's abort of the
%% mode, if there was one, and its status.
-spec traced_again(mfa()) -> ok.
traced_again(MFA) ->
    kprof_test_util:wait_or_say(
      fun() -> erlang:trace_info(MFA, traced) =:= {traced, local} end, 20000,
      fun() ->
              Aborted = receive {ft_aborted, Kind, Info} -> {Kind, Info} after 0 -> none end,
              {not_traced_again, MFA, erlang:trace_info(MFA, traced),
               {aborted, Aborted}, {guard, kprof_guard:status()}}
      end).

%% A module of zero-arity functions Fs, each returning its name, loaded
%% (the old version purged first).
-spec load_dyn(module(), [atom()]) -> ok.
load_dyn(M, Fs) ->
    Forms = [{attribute, 1, module, M}, {attribute, 2, export, [{F, 0} || F <- Fs]}]
        ++ [{function, 3, F, 0, [{clause, 3, [], [], [{atom, 3, F}]}]} || F <- Fs],
    {ok, M, Bin} = compile:forms(Forms, []),
    _ = code:purge(M),
    {module, M} = code:load_binary(M, atom_to_list(M) ++ ".erl", Bin),
    ok.

%%% open => speedscope

-spec open_speedscope() -> term().
open_speedscope() ->
    Dir = tmp_dir(),
    Log = filename:join(Dir, "args.txt"),
    Bin = filename:join(Dir, "bin"),
    ok = filelib:ensure_path(Bin),
    Fake = filename:join(Bin, "speedscope"),
    ok = file:write_file(Fake, ["#!/bin/sh\necho \"$@\" > ", Log, ".tmp && mv ", Log, ".tmp ",
                                Log, "\n"]),
    ok = file:change_mode(Fake, 8#755),
    with_path(Bin ++ ":" ++ os:getenv("PATH"),
              fun() ->
                      {ok, ok, Files} = kprof:flame_apply(fun() -> lists:seq(1, 10), ok end,
                                                          #{output_directory => Dir,
                                                            open => speedscope}),
                      [Json] = [F || F <- Files, lists:suffix(".speedscope.json", F)],
                      ?assertEqual(Json, string:trim(wait_file(Log, 10000)))
              end).

%% No speedscope on the PATH's absolute directories: a warning. One reached
%% through a relative PATH entry (resolved against the node's current
%% directory) is not run either.
-spec open_no_speedscope() -> term().
open_no_speedscope() ->
    Dir = tmp_dir(),
    Empty = filename:join(Dir, "empty"),
    ok = filelib:ensure_path(Empty),
    Rel = filename:join(Dir, "relative"),
    ok = filelib:ensure_path(Rel),
    Log = filename:join(Dir, "ran"),
    Fake = filename:join(Rel, "speedscope"),
    ok = file:write_file(Fake, ["#!/bin/sh
touch ", Log, "
"]),
    ok = file:change_mode(Fake, 8#755),
    {ok, Cwd} = file:get_cwd(),
    Up = filename:join([".." || _ <- tl(filename:split(Cwd))] ++ ["."]),
    RelEntry = filename:join(Up, tl(filename:split(Rel))),
    logger:set_handler_config(default, level, all),
    ok = logger:add_handler(kprof_ft_capture, ?MODULE, #{config => self()}),
    try
        with_path(Empty ++ ":" ++ RelEntry,
                  fun() ->
                          {ok, ok, Files} = kprof:flame_apply(fun() -> lists:seq(1, 10), ok end,
                                                              #{output_directory => Dir,
                                                                open => speedscope}),
                          ?assertEqual(length(kprof_opts:all_formats()), length(Files)),
                          Msg = receive {logged, warning, Text} -> Text after 5000 -> none end,
                          ?assertNotEqual(nomatch, string:find(Msg, "npm install -g speedscope")),
                          ?assertNot(filelib:is_regular(Log))
                  end)
    after
        logger:remove_handler(kprof_ft_capture),
        logger:set_handler_config(default, level, error)
    end.

%% A logger handler sending this test the text of warnings about speedscope.

-spec log(logger:log_event(), map()) -> ok.
log(#{level := Level, msg := Msg}, #{config := Pid}) ->
    Text = case Msg of
               {report, R} -> lists:flatten(io_lib:format("~0tp", [R]));
               {string, S} -> unicode:characters_to_list(S);
               {F, A} -> lists:flatten(io_lib:format(F, A))
           end,
    case string:find(Text, "speedscope") of
        nomatch -> ok;
        _ -> Pid ! {logged, Level, Text}, ok
    end.

%%% Helpers

-spec setup() -> ok.
setup() ->
    logger:set_handler_config(default, level, error),
    ok = kprof_test_util:start(#{}).

-spec cleanup(ok) -> ok.
cleanup(ok) ->
    _ = kprof:stop_tiers(),
    ok = kprof:stop(),
    _ = seq_trace:set_token([]),
    logger:set_handler_config(default, level, all),
    ok.

-spec measure(fun(() -> T)) -> {T, non_neg_integer()}.
measure(Fun) ->
    T0 = erlang:monotonic_time(microsecond),
    R = Fun(),
    {R, erlang:monotonic_time(microsecond) - T0}.

-spec capture_text() -> iolist().
capture_text() ->
    {ok, R} = kprof:report(#{format => term}),
    kprof_report_render:text(R, #{}).

-spec with_path(string(), fun(() -> T)) -> T.
with_path(Path, Fun) ->
    Old = os:getenv("PATH"),
    true = os:putenv("PATH", Path),
    try Fun()
    after true = os:putenv("PATH", Old)
    end.

-spec wait_file(file:filename(), integer()) -> string().
wait_file(File, Ms) when Ms =< 0 ->
    error({no_file, File});
wait_file(File, Ms) ->
    case file:read_file(File) of
        {ok, Bin} -> unicode:characters_to_list(Bin);
        {error, enoent} -> timer:sleep(20), wait_file(File, Ms - 20)
    end.

-spec tmp_dir() -> file:filename().
tmp_dir() ->
    Dir = filename:join(["/tmp", "kprof-ft-" ++ os:getpid() ++ "-" ++
                             integer_to_list(erlang:unique_integer([positive]))]),
    ok = filelib:ensure_path(Dir),
    Dir.
