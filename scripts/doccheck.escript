#!/usr/bin/env escript
%%! -noshell
%% `make doccheck': the names the docs give must exist, so that a rename or a
%% deletion cannot leave the docs pointing at nothing without a failing build.
%%
%%   scripts/doccheck.escript            the docs of the tree (below)
%%   scripts/doccheck.escript File...    only these files (the checker's own test)
%%
%% The docs: README.md, doc/*.md, examples/**/README*, and the comment lines
%% (edoc) of erlang/src/*.erl and examples/**/*.erl. Three kinds of name:
%%   - a path under a top folder of the tree (port/..., erlang/..., doc/..., ...):
%%     it must exist; a glob (port/tier*.c) must match a file;
%%   - Module:function/Arity: Module must be found (the tree's ebin folders,
%%     then OTP and installed applications through the code path); a module
%%     of the tree must export it, a module outside it must have it (the docs
%%     name trace frames, which can be local functions: gen:do_call/4). Not
%%     checked: my_* (the reader's own code in examples) and the modules of an
%%     optional dependency that is not installed, each printed as skipped;
%%   - `make Target...': each Target must be a rule of the Makefiles.
%% Prints each dead name with its file and line, then a count; exits 1 if any.
%% Run from the top of the tree after `make' (it reads the built beams).
%% A path is a word that starts with one of ?TOPS and a slash (not preceded by
%% a word character, `/' or `.'); functions of any module are checked, not
%% only kprof's.
-mode(compile).

%% Optional dependencies (README), absent from a CI machine: {Module, why}.
-define(OPTIONAL, [{pgsql, "erlang-p1-pgsql, optional (README: PostgreSQL instead of SQLite)"}]).
-define(TOPS, "port|erlang|examples|include|nif|bench|fuzz|test|doc|scripts").

main(Args) ->
    Files = case Args of
                [] -> doc_files();
                _ -> Args
            end,
    ok = add_ebins(),
    Targets = make_targets(),
    Dead = lists:append([check_file(F, Targets) || F <- Files]),
    Skipped = lists:usort([{M, Why} || F <- Files, {_, L} <- doc_lines(F), {M, _, _} <- mfas(L),
                                       {true, Why} <- [skipped(M)]]),
    [io:format("doccheck: not checked: ~s:* (~s)~n", [M, Why]) || {M, Why} <- Skipped],
    [io:format("~s:~b: ~s ~s~n", [F, L, Kind, Name]) || {F, L, Kind, Name} <- Dead],
    io:format("doccheck: ~b dead names in ~b files~n", [length(Dead), length(Files)]),
    halt(case Dead of [] -> 0; _ -> 1 end).

doc_files() ->
    lists:append([["README.md"],
                  wild("doc/*.md"),
                  wild("examples/**/README*"),
                  wild("erlang/src/*.erl"),
                  wild("examples/**/*.erl")]).

wild(Pattern) -> lists:sort(filelib:wildcard(Pattern)).

%% The beams `make' builds: the application, the tests, the shop, the benches.
add_ebins() ->
    Dirs = wild("erlang/ebin") ++ wild("_build/*/ebin") ++ wild("_build/*/*/ebin"),
    code:add_pathsa(lists:reverse(Dirs)).

%% Every rule `make' knows here (the Makefiles' database, no rule run).
make_targets() ->
    Out = os:cmd("make -pRrq -f Makefile __doccheck_no_such_target__ 2>/dev/null"),
    Lines = string:split(Out, "\n", all),
    sets:from_list(rule_names(Lines, false, [])).

rule_names([], _, Acc) -> Acc;
rule_names(["# Not a target:" | Rest], _, Acc) -> rule_names(Rest, true, Acc);
rule_names([L | Rest], Skip, Acc) ->
    case re:run(L, "^([A-Za-z0-9_./%-]+):(?!=)", [{capture, all_but_first, list}]) of
        {match, [T]} when not Skip -> rule_names(Rest, false, [T | Acc]);
        _ -> rule_names(Rest, false, Acc)
    end.

check_file(File, Targets) ->
    lists:append([check_line(File, N, L, Targets) || {N, L} <- doc_lines(File)]).

%% A file's doc lines, numbered: all of a text, the comment lines of a module.
doc_lines(File) ->
    {ok, Bin} = file:read_file(File),
    Lines = string:split(unicode:characters_to_list(Bin), "\n", all),
    Numbered = lists:zip(lists:seq(1, length(Lines)), Lines),
    case filename:extension(File) of
        ".erl" -> [{N, L} || {N, L} <- Numbered, is_comment(L)];
        _ -> Numbered
    end.

is_comment(Line) -> lists:prefix("%", string:trim(Line, leading)).

check_line(File, N, Line, Targets) ->
    [{File, N, "path", P} || P <- paths(Line), not path_exists(P)] ++
    [{File, N, "function", io_lib:format("~s:~s/~b", [M, F, A])}
     || {M, F, A} <- mfas(Line), skipped(M) =:= false, not exported(M, F, A)] ++
    [{File, N, "make target", T} || T <- make_words(Line), not sets:is_element(T, Targets)].

%% Paths as docrot.py reads them; a trailing `*...' makes the path a glob.
paths(Line) ->
    Re = "(?<![\\w/.])((?:" ?TOPS ")/[A-Za-z0-9_./-]*[A-Za-z0-9_/](?:\\*[A-Za-z0-9_.*]*)?)",
    [P || [P] <- matches(Line, Re),
          nomatch =:= re:run(P, "[A-Z]{2,}|Dir|Base|/\\d+$")].

path_exists(P) ->
    case lists:member($*, P) of
        true -> filelib:wildcard(P) =/= [];
        false -> filelib:is_file(P)
    end.

mfas(Line) ->
    Re = "(?<![\\w?:])([a-z][a-z0-9_]*):([a-z][a-zA-Z0-9_]*)/(\\d+)",
    [{list_to_atom(M), list_to_atom(F), list_to_integer(A)} || [M, F, A] <- matches(Line, Re)].

exported(M, F, A) ->
    code:ensure_loaded(M) =:= {module, M} andalso
        (erlang:function_exported(M, F, A) orelse
         (not in_tree(M) andalso lists:member({F, A}, M:module_info(functions)))).

in_tree(M) ->
    {ok, Cwd} = file:get_cwd(),
    lists:prefix(Cwd ++ "/", filename:absname(code:which(M))).

%% Modules named in docs that the build does not have, on purpose.
skipped(M) ->
    case atom_to_list(M) of
        "my_" ++ _ -> {true, "the reader's own code"};
        _ -> case lists:keyfind(M, 1, ?OPTIONAL) of
                 {M, Why} -> {code:which(M) =:= non_existing, Why};
                 false -> false
             end
    end.

%% `make a b VAR=x' in a code span, after a `$ ' prompt or at a line's start:
%% the words up to the first that is not a target or a variable.
make_words(Line) ->
    Re = "(?:^\\s*|`|\\$ )make((?:\\s+[A-Za-z0-9_.=/-]+)+)",
    lists:append([targets_of(string:lexemes(Ws, " \t")) || [Ws] <- matches(Line, Re)]).

targets_of([W | Rest]) ->
    case {lists:member($=, W), re:run(W, "^[a-z][a-z0-9_.-]*$")} of
        {true, _} -> targets_of(Rest);
        {false, {match, _}} -> [W | targets_of(Rest)];
        _ -> []
    end;
targets_of([]) -> [].

matches(Line, Re) ->
    case re:run(Line, Re, [global, unicode, {capture, all_but_first, list}]) of
        {match, Ms} -> Ms;
        nomatch -> []
    end.
