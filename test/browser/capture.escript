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
    ok = kprof:stop(),
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
