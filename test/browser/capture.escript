#!/usr/bin/env escript
%% capture.escript DIR EBIN... : one flame_apply of kprof_flame_tests:shape_top/0 (a
%% known call tree) into DIR, all four formats, and DIR/expect.json saying
%% what check.js must find in the viewers. EBIN: code paths to add
%% (erlang/ebin and the test beams; test/browser.mk gives them).
-mode(compile).

main([Dir | Ebins]) when Ebins =/= [] ->
    [true = code:add_patha(E) || E <- Ebins],
    ok = logger:set_primary_config(level, warning),
    ok = kprof:start(),
    {module, _} = code:ensure_loaded(kprof_flame_tests),
    {ok, done, Files} = kprof:flame_apply(fun kprof_flame_tests:shape_top/0,
                                          #{output_directory => Dir}),
    %% Several processes (issue 13): the parent and 8 workers, one root each,
    %% and the same 8 grouped (the default with children => true).
    Multi = filename:join(Dir, "multi"),
    Grouped = filename:join(Dir, "grouped"),
    Work = fun() -> kprof_flame_tests:fifty(8, 2) end,
    Big = #{children => true, max_lag_ms => 30000, max_queue_bytes => 64 bsl 20},
    {ok, done, MFiles} = kprof:flame_apply(Work, Big#{output_directory => Multi, group => pid}),
    {ok, done, GFiles} = kprof:flame_apply(Work, Big#{output_directory => Grouped}),
    ok = kprof:stop(),
    [totals(D, Fs) || {D, Fs} <- [{Multi, MFiles}, {Grouped, GFiles}]],
    Frames = ["kprof_flame_tests:shape_top/0", "kprof_flame_tests:shape_sleeper/0",
              "kprof_flame_tests:shape_burner/1", "kprof_flame_tests:spin/1",
              "kprof_flame_tests:shape_deep/1", "timer:sleep/1", "SLEEP"],
    Json = io_lib:format("{\"frames\": [~s], \"profile\": \"~s\", "
                         "\"zoom\": \"kprof_flame_tests:shape_burner/1\", \"search\": \"spin|deep\"}~n",
                         [lists:join(", ", ["\"" ++ F ++ "\"" || F <- Frames]),
                          pid_to_list(self())]),
    ok = file:write_file(filename:join(Dir, "expect.json"), Json),
    io:format("capture: ~p~n", [Files]);
main(_) ->
    io:format(standard_error, "usage: capture.escript DIR EBIN...~n", []),
    halt(2).

%% D/expect.json: {"roots": {Root: microseconds}}, each root's total from the
%% folded file (%XX escapes undone),
%% for check.js to find in the viewers.
totals(D, Files) ->
    [Folded] = [F || F <- Files, filename:extension(F) =:= ".folded"],
    {ok, Bin} = file:read_file(Folded),
    Sums = lists:foldl(fun(L, M) ->
                               [Stack, N] = string:split(L, <<" ">>, trailing),
                               [Root | _] = binary:split(Stack, <<";">>),
                               maps:update_with(unpct(Root), fun(V) -> V + binary_to_integer(N) end,
                                                binary_to_integer(N), M)
                       end, #{}, binary:split(Bin, <<"\n">>, [global, trim_all])),
    Json = ["{\"roots\": {",
            lists:join(", ", [io_lib:format("\"~ts\": ~b", [R, N]) || {R, N} <- maps:to_list(Sums)]),
            "}}\n"],
    ok = file:write_file(filename:join(D, "expect.json"), unicode:characters_to_binary(Json)).

unpct(<<$%, H:2/binary, R/binary>>) -> <<(binary_to_integer(H, 16)), (unpct(R))/binary>>;
unpct(<<C, R/binary>>) -> <<C, (unpct(R))/binary>>;
unpct(<<>>) -> <<>>.
