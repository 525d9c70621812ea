#!/usr/bin/env escript
%% -*- erlang -*-
%%! -noshell
%% sizecheck.escript: how big the modules and functions are (issue 24's
%% bounds: an Erlang module at most 600 lines of code, a function at most 60,
%% a C function at most 100).
%%
%%   scripts/sizecheck.escript [--check] [--top N] [--max-module L] [--max-fun L]
%%                             [--max-c L] [--only FILE...] [FILE...]
%%
%% Without FILEs: erlang/src/*.erl, port/*.c, port/*/*.c and nif/*.c; FILEs
%% are relative to the tree's root, wherever the script is run from. Prints three tables: the modules by
%% code lines, the longest Erlang functions, the longest C functions, each with
%% what passes its bound marked `OVER'. With --check the exit status is 1 when
%% anything is over; --only limits that verdict to the files named after it (a
%% gate on the files a change touched while others are still over).
%%
%% What is counted: lines that are neither blank nor only a comment (`%' in
%% Erlang; `/* */' and `//' in C). A module
%% counts every such line; a function the lines from its head to its last
%% token (Erlang: its last clause's end; C: the `}' in column 0 that closes a
%% definition whose head starts in column 0). Specs and docs above a function
%% are not its lines.
-mode(compile).

main(Args) ->
    %% Paths are the tree's, wherever it is run from.
    ok = file:set_cwd(filename:dirname(filename:dirname(filename:absname(escript:script_name())))),
    Opts = args(Args, #{check => false, top => 15, max_module => 600, max_fun => 60,
                        max_c => 100, only => [], files => []}),
    Files = case maps:get(files, Opts) of
                [] -> default_files();
                Fs -> Fs
            end,
    {Erl, C} = lists:partition(fun(F) -> filename:extension(F) =:= ".erl" end, Files),
    Mods = [module_row(F) || F <- Erl],
    Funs = [{mod_name(F), Name, Len} || F <- Erl, {Name, Len} <- erl_funs(F)],
    CFuns = [{F, Name, Len} || F <- C, {Name, Len} <- c_funs(F)],
    Over = modules(Mods, Opts) ++ erl_functions(Funs, Opts) ++ c_functions(CFuns, Opts),
    Only = maps:get(only, Opts),
    Judged = [O || {File, _} = O <- Over, Only =:= [] orelse lists:member(File, Only)],
    io:format("~b over: ~ts~n", [length(Judged),
                                 lists:join(", ", [What || {_, What} <- Judged])]),
    case maps:get(check, Opts) andalso Judged =/= [] of
        true -> halt(1);
        false -> halt(0)
    end.

args([], O) -> O#{files := lists:reverse(maps:get(files, O)), only := lists:reverse(maps:get(only, O))};
args(["--check" | R], O) -> args(R, O#{check := true});
args(["--top", N | R], O) -> args(R, O#{top := list_to_integer(N)});
args(["--max-module", N | R], O) -> args(R, O#{max_module := list_to_integer(N)});
args(["--max-fun", N | R], O) -> args(R, O#{max_fun := list_to_integer(N)});
args(["--max-c", N | R], O) -> args(R, O#{max_c := list_to_integer(N)});
args(["--only" | R], O) ->
    {Only, Rest} = lists:splitwith(fun(A) -> not lists:prefix("--", A) end, R),
    args(Rest, O#{only := lists:reverse(Only) ++ maps:get(only, O)});
args([F | R], O) -> args(R, O#{files := [F | maps:get(files, O)]}).

default_files() ->
    lists:sort(filelib:wildcard("erlang/src/*.erl") ++ filelib:wildcard("port/*.c")
               ++ filelib:wildcard("port/*/*.c") ++ filelib:wildcard("nif/*.c")).

mod_name(F) -> filename:basename(F, ".erl").

%%% Tables

modules(Mods, #{max_module := Max}) ->
    io:format("Erlang modules (lines, code lines; bound ~b code lines)~n", [Max]),
    Sorted = lists:reverse(lists:keysort(3, Mods)),
    _ = [io:format("  ~-34ts ~6b ~6b~ts~n", [F, N, Code, mark(Code, Max)])
         || {F, N, Code} <- Sorted],
    [{F, io_lib:format("~ts ~b code lines", [F, Code])} || {F, _, Code} <- Sorted, Code > Max].

erl_functions(Funs, #{max_fun := Max, top := Top}) ->
    io:format("longest Erlang functions (code lines; bound ~b)~n", [Max]),
    Sorted = lists:reverse(lists:keysort(3, Funs)),
    _ = [io:format("  ~-50ts ~4b~ts~n", [io_lib:format("~ts:~ts", [M, N]), L, mark(L, Max)])
         || {M, N, L} <- shown(Sorted, Max, Top)],
    [{"erlang/src/" ++ M ++ ".erl", io_lib:format("~ts:~ts ~b", [M, N, L])}
     || {M, N, L} <- Sorted, L > Max].

c_functions(Funs, #{max_c := Max, top := Top}) ->
    io:format("longest C functions (code lines; bound ~b)~n", [Max]),
    Sorted = lists:reverse(lists:keysort(3, Funs)),
    _ = [io:format("  ~-50ts ~4b~ts~n", [io_lib:format("~ts:~ts", [F, N]), L, mark(L, Max)])
         || {F, N, L} <- shown(Sorted, Max, Top)],
    [{F, io_lib:format("~ts:~ts ~b", [F, N, L])} || {F, N, L} <- Sorted, L > Max].

%% The top N, and every one over the bound however many.
shown(Sorted, Max, Top) ->
    {Over, Rest} = lists:splitwith(fun({_, _, L}) -> L > Max end, Sorted),
    Over ++ lists:sublist(Rest, max(0, Top - length(Over))).

mark(L, Max) when L > Max -> "  OVER";
mark(_, _) -> "".

%%% Erlang

module_row(F) ->
    Lines = lines(F),
    {F, length(Lines), length([L || L <- Lines, erl_code(L)])}.

erl_code(L) ->
    case string:trim(L, leading) of
        "" -> false;
        [$% | _] -> false;
        _ -> true
    end.

%% Each function's code lines, from its first line to its last token's.
erl_funs(F) ->
    Lines = list_to_tuple(lines(F)),
    {ok, Forms} = epp_dodger:parse_file(F, [{no_fail, true}]),
    [{io_lib:format("~ts/~b", [name(Fm), erl_syntax:function_arity(Fm)]),
      code_lines(Lines, first_line(Fm), last_line(Fm))}
     || Fm <- Forms, erl_syntax:type(Fm) =:= function].

name(Fm) ->
    atom_to_list(erl_syntax:atom_value(erl_syntax:function_name(Fm))).

first_line(T) -> erl_anno:line(erl_syntax:get_pos(T)).

last_line(T) ->
    case erl_syntax:subtrees(T) of
        [] -> first_line(T);
        Groups -> lists:max([first_line(T) | [last_line(S) || G <- Groups, S <- G]])
    end.

code_lines(Lines, From, To) ->
    length([I || I <- lists:seq(From, min(To, tuple_size(Lines))), erl_code(element(I, Lines))]).

%%% C

%% Definitions whose head starts in column 0 (a type, then a name and its
%% parameters, perhaps over several lines, ending in `{') and whose body
%% ends at a `}' in column 0. Comments are blanked first (newlines kept), so
%% a line that held only a comment is blank.
c_funs(F) ->
    {ok, Bin} = file:read_file(F),
    Text = strip_comments(unicode:characters_to_list(Bin)),
    c_scan(string:split(Text, "\n", all), []).

c_scan([], Acc) ->
    lists:reverse(Acc);
c_scan([L | Rest], Acc) ->
    case c_head_start(L) andalso c_head([L], Rest) of
        {body, Head, Body} ->
            {Len, Rest1} = c_body(Body, c_code(Head)),
            c_scan(Rest1, [{c_name(lists:last(Head)), Len} | Acc]);
        _ ->
            c_scan(Rest, Acc)
    end.

c_head_start([C | _] = L) when C >= $a, C =< $z; C >= $A, C =< $Z; C =:= $_ ->
    lists:member($(, L) andalso not lists:prefix("typedef", L);
c_head_start(_) ->
    false.

%% The head goes on until a line ending in `{' (a definition) or `;' (a
%% declaration, skipped); newest line first.
c_head(Head = [Last | _], Rest) ->
    case lists:last([$\s | string:trim(Last, trailing)]) of
        ${ -> {body, Head, Rest};
        $; -> no;
        _ when Rest =:= []; length(Head) > 8 -> no;
        _ -> c_head([hd(Rest) | Head], tl(Rest))
    end.

c_name(Head) ->
    Before = lists:takewhile(fun(C) -> C =/= $( end, Head),
    lists:last(string:lexemes(Before, " *\t")).

c_body([], Count) ->
    {Count, []};
c_body(["}" ++ _ = L | Rest], Count) ->
    {Count + c_code([L]), Rest};
c_body([L | Rest], Count) ->
    c_body(Rest, Count + c_code([L])).

c_code(Ls) ->
    length([L || L <- Ls, string:trim(L) =/= ""]).

%% Block and line comments as spaces, string and character literals kept.
strip_comments("/*" ++ R) -> block(R);
strip_comments("//" ++ R) -> line(R);
strip_comments([$" | R]) -> [$" | literal($", R)];
strip_comments([$' | R]) -> [$' | literal($', R)];
strip_comments([C | R]) -> [C | strip_comments(R)];
strip_comments([]) -> [].

block("*/" ++ R) -> "  " ++ strip_comments(R);
block([$\n | R]) -> [$\n | block(R)];
block([_ | R]) -> [$\s | block(R)];
block([]) -> [].

line([$\n | _] = R) -> strip_comments(R);
line([_ | R]) -> [$\s | line(R)];
line([]) -> [].

literal(Q, [$\\, C | R]) -> [$\\, C | literal(Q, R)];
literal(Q, [Q | R]) -> [Q | strip_comments(R)];
literal(_Q, [$\n | R]) -> [$\n | strip_comments(R)];
literal(Q, [C | R]) -> [C | literal(Q, R)];
literal(_, []) -> [].

lines(F) ->
    {ok, Bin} = file:read_file(F),
    string:split(unicode:characters_to_list(Bin), "\n", all).
