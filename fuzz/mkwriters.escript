#!/usr/bin/env escript
%% fuzz/mkwriters.escript Dir: seed scripts for fuzz_writers (fuzz/fuzz_writers.c,
%% whose header says the format) in Dir: captures of a few processes whose names,
%% initial calls and functions hold what the writers escape (quotes, `;', spaces,
%% newlines, `<', `&', `%', a leading `(', invalid UTF-8, a 64 KiB name), under each
%% grouping, folded recursion and Elixir names.
-mode(compile).

main([Dir]) ->
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Names = [<<"plain">>, <<"a;b c%d">>, <<"(paren\nnew\"line'">>, <<"<svg>&amp;</svg>">>,
             <<16#ff, 16#fe, "bad", 16#c3>>, <<"naïve_名前"/utf8>>],
    Seeds = [{H, script(Names, Big)} || H <- [0, 1, 2, 3, 4, 8, 16#34, 16#7f, 16#ff],
                                        Big <- [false, true]],
    _ = [ok = file:write_file(filename:join(Dir, "seed-" ++ integer_to_list(I)),
                              [<<H, 0, 0, 0>>, S])
         || {I, {H, S}} <- lists:zip(lists:seq(1, length(Seeds)), Seeds)],
    io:format("mkwriters: ~b seeds -> ~s~n", [length(Seeds), Dir]).

%% Process 1 named, process 2 with an initial call, calls nested three deep with
%% hostile module and function names, a return, scheduling, GC, a spawn.
script(Names, Big) ->
    [N1, N2, N3, N4, N5, N6] = Names,
    [names(1, N1, N2), names(2, N3, if Big -> big; true -> N4 end),
     call(1, N5, N6, 1, none), call(1, N2, N1, 2, {N5, N6, 1}), call(1, N3, N3, 0, {N2, N1, 2}),
     call(1, N3, N3, 0, {N3, N3, 0}), op(2, 1, [mfa(N2, N1, 2)]),
     call(2, N4, N1, 3, none), op(4, 2, [mfa(N4, N1, 3)]), op(3, 2, [mfa(N4, N1, 3)]),
     op(5, 1, []), op(5, 1, []), op(6, 1, [3, atom(N6), atom(N4)]),
     call(3, N6, N5, 1, none), op(7, 1, [atom(N2)])].

names(Pid, Name, big) -> op(0, Pid, [text(Name), 255, 100, byte_size(<<"0123456789;<&\"">>),
                                     <<"0123456789;<&\"">>]);
names(Pid, Name, Call) -> op(0, Pid, [text(Name), text(Call)]).

call(Pid, M, F, A, none) -> op(1, Pid, [mfa(M, F, A), 0]);
call(Pid, M, F, A, {CM, CF, CA}) -> op(1, Pid, [mfa(M, F, A), 1, mfa(CM, CF, CA)]).

op(Code, Pid, Args) -> [Code bor (5 bsl 3), Pid - 1 | Args].
mfa(M, F, A) -> [atom(M), atom(F), A].
atom(B) -> [byte_size(B), B].
text(B) -> [byte_size(B), B].
