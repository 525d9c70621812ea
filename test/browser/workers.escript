#!/usr/bin/env escript
%% workers.escript DIR [fold] EBIN... : the case of issue 13, a flame_apply of 50 worker
%% processes (kprof_flame_tests:fifty/2, lists/maps/ets work) with
%% children => true, into DIR in speedscope and SVG (default options otherwise;
%% `fold': fold_recursion => true).
%% With the EBINs of another build (e.g. an older commit's), the same capture as
%% that build made it: test/browser/screenshot.js shows the files side by side.
-mode(compile).

main([Dir, "fold" | Ebins]) when Ebins =/= [] ->
    run(Dir, Ebins, #{fold_recursion => true});
main([Dir | Ebins]) when Ebins =/= [] ->
    run(Dir, Ebins, #{});
main(_) ->
    io:format(standard_error, "usage: workers.escript DIR [fold] EBIN...~n", []),
    halt(2).

run(Dir, Ebins, Extra) ->
    [true = code:add_patha(E) || E <- Ebins],
    ok = logger:set_primary_config(level, warning),
    ok = kprof:start(),
    {module, _} = code:ensure_loaded(kprof_flame_tests),
    R = kprof:flame_apply(fun() -> kprof_flame_tests:fifty(50, 4) end,
                          maps:merge(#{output_directory => Dir, children => true,
                            output_format => [speedscope, svg], max_lag_ms => 30000,
                            max_queue_bytes => 64 bsl 20}, Extra)),
    ok = kprof:stop(),
    io:format("workers: ~p~n", [R]).
