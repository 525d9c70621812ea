#!/usr/bin/env escript
%% capture.escript DIR EBIN... : the demo's shop started on a free port of
%% 127.0.0.1, one `GET /report' captured with kprof:flame_capture/3 as
%% `make demo' does, written as callgrind.out.report (and report.folded) into
%% DIR, and DIR/expect.txt: the call graph's root function and the functions of
%% GET /report that a viewer must show, one a line. EBIN: code paths to add.
-mode(compile).

main([Dir | Ebins]) when Ebins =/= [] ->
    [true = code:add_patha(E) || E <- Ebins],
    ok = logger:set_primary_config(level, warning),
    {ok, #{port := Port}} = shop:start(),
    ok = kprof:start(),
    _ = shop_load:get(Port, "/report"),   % code loaded, caches warm
    Asker = spawn_link(fun() -> ask(Port) end),
    Opts = #{output_directory => Dir, output_format => [folded, callgrind], name => "report",
             timeout => 20000},
    {ok, Files} = kprof:flame_capture({shop_http, report, 1}, 1, Opts),
    unlink(Asker),
    exit(Asker, kill),
    ok = kprof:stop(),
    ok = shop:stop(),
    Expect = ["shop_http:report/1", "shop_db:report/0", "shop_tpl:report_page/2"],
    {ok, Text} = file:read_file(filename:join(Dir, "callgrind.out.report")),
    [case binary:match(Text, list_to_binary(F)) of
         nomatch -> io:format(standard_error, "capture: ~s is not in the file~n", [F]), halt(1);
         _ -> ok
     end || F <- Expect],
    ok = file:write_file(filename:join(Dir, "expect.txt"), [[F, $\n] || F <- Expect]),
    io:format("capture: ~p~n", [Files]);
main(_) ->
    io:format(standard_error, "usage: capture.escript DIR EBIN...~n", []),
    halt(2).

ask(Port) ->
    timer:sleep(100),
    _ = shop_load:get(Port, "/report"),
    ask(Port).
