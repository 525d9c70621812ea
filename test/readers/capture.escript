#!/usr/bin/env escript
%% capture.escript DIR EBIN: the files check.sh feeds to the formats' own readers.
%% A module of its own, whose module and function names hold what each format must
%% escape (a space, `;', quotes, `<&>', UTF-8), runs twice under kprof:flame_apply
%% with every format: DIR/a corrected for tracing's cost, DIR/b with correct =>
%% false (raw times), so the two meta files show both shapes of the correction
%% and difffolded.pl gets two captures of one program. DIR/formats lists the
%% formats asked, one a line; DIR/a/files and DIR/b/files `Format Path' lines.
%% EBIN: kprof's erlang/ebin.
-mode(compile).

-define(MOD, 'kprof readers; <&> "m"').
-define(FORMATS, [folded, perf, speedscope, svg, callgrind, folded_calls]).

main([Dir, Ebin]) ->
    true = code:add_patha(Ebin),
    ok = logger:set_primary_config(level, warning),
    {module, ?MOD} = load(),
    ok = kprof:start(),
    [begin
         Out = filename:join(Dir, Sub),
         {ok, done, Files} = kprof:flame_apply(fun ?MOD:run/0,
                                               Opts#{output_directory => Out,
                                                     output_format => ?FORMATS}),
         %% The paths come in the order of the formats asked (the KS_FORMAT rows').
         ok = file:write_file(filename:join(Out, "files"),
                              [[atom_to_list(F), $\s, P, $\n] || {F, P} <- lists:zip(?FORMATS, Files)]),
         io:format("capture: ~s: ~p~n", [Sub, Files])
     end || {Sub, Opts} <- [{"a", #{}}, {"b", #{correct => false}}]],
    ok = kprof:stop(),
    ok = file:write_file(filename:join(Dir, "formats"),
                         [[atom_to_list(F), $\n] || F <- ?FORMATS]);
main(_) ->
    io:format(standard_error, "usage: capture.escript DIR EBIN~n", []),
    halt(2).

%% run/0 calls 'f é;<&> "q"'/1 (a body recursion 5 deep) 20 times, each frame
%% busy 200 us, then sleeps 20 ms: calls, returns, a sleep and odd names.
load() ->
    M = "'kprof readers; <&> \"m\"'",
    F = "'f é;<&> \"q\"'",
    Src = ["-module(" ++ M ++ ").",
           "-export([run/0, " ++ F ++ "/1]).",
           "run() -> [5 = " ++ M ++ ":" ++ F ++ "(5) || _ <- lists:seq(1, 20)], "
           "timer:sleep(20), done.",
           F ++ "(0) -> 0; " ++ F ++ "(N) -> spin(erlang:monotonic_time(microsecond) + 200), "
           "1 + " ++ M ++ ":" ++ F ++ "(N - 1).",
           "spin(Until) -> case erlang:monotonic_time(microsecond) < Until of "
           "true -> spin(Until); false -> ok end."],
    Forms = [begin
                 {ok, Tokens, _} = erl_scan:string(unicode:characters_to_list(S)),
                 {ok, Form} = erl_parse:parse_form(Tokens),
                 Form
             end || S <- Src],
    {ok, ?MOD, Bin} = compile:forms(Forms, [return_errors]),
    code:load_binary(?MOD, "kprof_readers.erl", Bin).
