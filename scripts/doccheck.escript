#!/usr/bin/env escript
%%! -noshell
%% `make doccheck': the names the docs give must exist, so that a rename or a
%% deletion cannot leave the docs pointing at nothing without a failing build.
%%
%%   scripts/doccheck.escript            the docs of the tree (below)
%%   scripts/doccheck.escript File...    only these files (the checker's own test)
%%
%% The docs: README.md, CONTRIBUTING.md, doc/*.md, examples/**/README*, fuzz/README*,
%% the comment lines (edoc) of erlang/src/*.erl and examples/**/*.erl, the comments of the C
%% sources (port/, include/, nif/, fuzz/, test/c/, bench/*.c: /* */ and //, with
%% string and character literals left out), and the comment lines and usage
%% text of the scripts (scripts/*, fuzz/*.sh, bench/*.sh, fuzz/*.escript: lines
%% that start with `#' or `%', and any line saying `usage'). The names:
%%   - a path under a top folder of the tree (port/..., erlang/..., doc/..., ...):
%%     it must exist; a glob (port/tiers/tier*.c) must match a file;
%%   - Module:function/Arity: Module must be found (the tree's ebin folders,
%%     then OTP and installed applications through the code path); a module
%%     of the tree must export it, a module outside it must have it (the docs
%%     name trace frames, which can be local functions: gen:do_call/4; so may
%%     the examples' modules, the code the transcripts profile). Not
%%     checked: my_* (the reader's own code in examples), a module of one
%%     letter (the made-up frames of the C tests' comments) and the modules of
%%     an optional dependency that is not installed, each printed as skipped;
%%     on another OTP than ?DOCS_OTP, the one the transcripts were run on, a
%%     function an OTP module does not have there (its internals change
%%     between releases: erl_eval:eval_generate/8 on 25 is another arity on
%%     29) is printed as not checked;
%%   - `make Target...' in a code span or after a `$ ' prompt, or a line that
%%     is only a make command (a comment after it aside): each Target must be
%%     a rule of the Makefiles;
%%   - a file name (kprof_options.hrl, ks_ring.h): the tree, OTP or the
%%     system's headers must have it (a capitalised one, File.erl, is a
%%     placeholder);
%%   - a C name (ks_tier_opts, KS_FIELD): the code of the tree's C sources
%%     must have it, not only their comments;
%%   - an option (in a text or a module's doc; include/ks_options.h, through
%%     kprof_opts, is the table): a key of the map given to kprof:start_tiers,
%%     kprof:flame_apply, flame_capture, flame_pid, calls, replay or sample on the same
%%     line must be an option of that function; the value after `group =>' or
%%     `names =>' one of the enum's values, a format after `output_format =>'
%%     one of the formats; a flag after `kprof_sink --replay' one of the replay's
%%     flags (`--no-' before a boolean's) and a format after its `--format' one
%%     of the formats;
%%   - in a script, on every line (code too): an absolute path outside the
%%     system's own folders (?SYSTEM_DIRS), such as a tool beside the
%%     checkout: a script runs from any clone, on any machine.
%% Prints each dead name with its file and line, then how many names were
%% checked; exits 1 if any is dead.
%% Run from the top of the tree after `make' (it reads the built beams).
%% A path is a word that starts with one of ?TOPS and a slash (not preceded by
%% a word character, `/' or `.'); functions of any module are checked, not
%% only kprof's.
-mode(compile).

%% The OTP release the docs' transcripts were run on (README: Supported OTPs and systems).
-define(DOCS_OTP, "25").
%% Optional dependencies (README), absent from a CI machine: {Module, why}.
-define(OPTIONAL, [{pgsql, "erlang-p1-pgsql, optional (doc/tiers.md: PostgreSQL instead of SQLite)"}]).
-define(TOPS, "port|erlang|examples|include|nif|bench|fuzz|test|doc|scripts").
%% The absolute paths a script may name: the system's own folders.
-define(SYSTEM_DIRS, "bin|dev|etc|lib|opt|proc|run|sbin|sys|tmp|usr|var").
-define(KINDS, [path, function, make, file, c_name, option, script_line]).
%% The user functions whose options map doccheck reads, and the table's mode of each.
-define(OPTION_FUNS, [{"start_tiers", tiers}, {"flame_apply", flame}, {"flame_capture", flame},
                      {"flame_pid", flame}, {"calls", calls}, {"replay", replay},
                      {"sample", sample}]).

main(Args) ->
    Files = case Args of
                [] -> doc_files();
                _ -> Args
            end,
    ok = add_ebins(),
    Targets = make_targets(),
    Checked = [check_file(F, Targets) || F <- Files],
    Dead = lists:append([D || {D, _} <- Checked]),
    Counts = [lists:sum([maps:get(K, C, 0) || {_, C} <- Checked]) || K <- ?KINDS],
    Skipped = lists:usort([{M, Why} || F <- Files, {_, L} <- doc_lines(F), {M, _, _} <- mfas(L),
                                       {true, Why} <- [skipped(M)]]),
    [io:format("doccheck: not checked: ~s:* (~s)~n", [M, Why]) || {M, Why} <- Skipped],
    [io:format("~s:~b: ~s ~s~n", [F, L, Kind, Name]) || {F, L, Kind, Name} <- Dead],
    io:format("doccheck: ~b dead names in ~b files (~b paths, ~b functions, ~b make targets, "
              "~b file names, ~b C names, ~b options; ~b script lines read for paths outside "
              "the tree)~n",
              [length(Dead), length(Files) | Counts]),
    halt(case Dead of [] -> 0; _ -> 1 end).

doc_files() ->
    lists:append([["README.md", "CONTRIBUTING.md"],
                  wild("doc/*.md"),
                  wild("examples/**/README*"),
                  wild("fuzz/README*"),
                  wild("erlang/src/*.erl"),
                  wild("examples/**/*.erl"),
                  c_files(),
                  script_files()]).

c_files() ->
    lists:usort(lists:append([wild(P) || P <- ["port/*.[ch]", "port/*/*.[ch]", "include/*.h",
                                               "nif/*.[ch]", "fuzz/*.[ch]", "test/c/*.[ch]",
                                               "bench/*.c"]])).

script_files() ->
    lists:usort(lists:append([wild(P) || P <- ["scripts/*", "fuzz/*.sh", "bench/*.sh",
                                               "fuzz/*.escript"]])).

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

%% A file's dead names, and how many names of each kind it checked.
check_file(File, Targets) ->
    Lines = doc_lines(File),
    Found = [{N, path, P} || {N, L} <- Lines, P <- paths(L)] ++
        [{N, function, MFA} || {N, L} <- Lines, {M, _, _} = MFA <- mfas(L), skipped(M) =:= false] ++
        [{N, make, T} || {N, L} <- Lines, T <- make_words(L)] ++
        [{N, file, W} || {N, L} <- Lines, W <- file_names(L)] ++
        [{N, c_name, W} || {N, L} <- Lines, W <- c_names(L)] ++
        [{N, option, O} || lists:member(doc_kind(File), [text, erlang]), {N, L} <- Lines,
                           O <- options(L)],
    Script = [NL || doc_kind(File) =:= script, NL <- all_lines(File)],
    Missing = [{N, MFA} || {N, function, {M, F, A} = MFA} <- Found, not exported(M, F, A)],
    [io:format("doccheck: not checked: ~s:~s/~b (~s:~b: OTP ~s's ~s has no such function; "
               "the transcripts ran on OTP ~s)~n",
               [M, F, A, File, N, erlang:system_info(otp_release), M, ?DOCS_OTP])
     || {N, {M, F, A}} <- Missing, other_otp(M)],
    Dead = [{File, N, "path", P} || {N, path, P} <- Found, not path_exists(P)] ++
        [{File, N, "function", io_lib:format("~s:~s/~b", [M, F, A])}
         || {N, {M, F, A}} <- Missing, not other_otp(M)] ++
        [{File, N, "make target", T} || {N, make, T} <- Found, not sets:is_element(T, Targets)] ++
        [{File, N, "file", W} || {N, file, W} <- Found, not known_file(W)] ++
        [{File, N, "C name", W} || {N, c_name, W} <- Found, not c_defined(W)] ++
        [{File, N, What, W} || {N, option, {What, W, false}} <- Found] ++
        [{File, N, "path outside the tree", P} || {N, L} <- Script, P <- outside_paths(L)],
    Counts = lists:foldl(fun({_, Kind, _}, Acc) -> maps:update_with(Kind, fun(C) -> C + 1 end, 1, Acc) end,
                         #{script_line => length(Script)}, Found),
    {lists:keysort(2, Dead), Counts}.

all_lines(File) ->
    {ok, Bin} = file:read_file(File),
    Lines = string:split(unicode:characters_to_list(Bin), "\n", all),
    lists:zip(lists:seq(1, length(Lines)), Lines).

%% A file's doc lines, numbered: all of a text, the comment lines of a module,
%% the comments of a C file (all else blanked), the comment lines and usage
%% text of a script (its #! line aside).
doc_lines(File) ->
    Numbered = all_lines(File),
    case doc_kind(File) of
        erlang -> [{N, L} || {N, L} <- Numbered, is_comment(L, "%")];
        c -> [{N, L} || {N, L} <- c_comments(Numbered), string:trim(L) =/= ""];
        script -> [{N, L} || {N, L} <- Numbered, not lists:prefix("#!", L),
                             is_comment(L, "#") orelse is_comment(L, "%") orelse is_usage(L)];
        text -> Numbered
    end.

%% What a file is: by its extension, a script by its folder or its #! line.
doc_kind(File) ->
    case filename:extension(File) of
        ".erl" -> erlang;
        ".c" -> c;
        ".h" -> c;
        Ext when Ext =:= ".sh"; Ext =:= ".escript"; Ext =:= ".py" -> script;
        _ -> case all_lines(File) of
                 [{1, "#!" ++ _} | _] -> script;
                 _ -> text
             end
    end.

is_comment(Line, Char) -> lists:prefix(Char, string:trim(Line, leading)).

is_usage(Line) -> string:find(string:lowercase(Line), "usage") =/= nomatch.

%% The lines of a C file with all but its comments blanked: code, string and
%% character literals become spaces; newlines stay, so line numbers do.
c_comments(Numbered) ->
    Blanked = blank(lists:flatten(lists:join($\n, [L || {_, L} <- Numbered])), code, comment),
    Lines = string:split(Blanked, "\n", all),
    lists:zip(lists:seq(1, length(Lines)), Lines).

%% blank(Chars, State, Keep): the comments (Keep comment) or the code (Keep
%% code) of C text, the rest spaces; literals are never kept.
blank([], _, _) -> [];
blank([$\n | T], line, K) -> [$\n | blank(T, code, K)];
blank([$\n | T], S, K) -> [$\n | blank(T, S, K)];
blank([$/, $* | T], code, K) -> "  " ++ blank(T, block, K);
blank([$/, $/ | T], code, K) -> "  " ++ blank(T, line, K);
blank([$" | T], code, K) -> [$\s | blank(T, str, K)];
blank([$' | T], code, K) -> [$\s | blank(T, chr, K)];
blank([C | T], code, code) -> [C | blank(T, code, code)];
blank([_ | T], code, K) -> [$\s | blank(T, code, K)];
blank([$*, $/ | T], block, K) -> "  " ++ blank(T, code, K);
blank([$\\, C | T], S, K) when (S =:= str orelse S =:= chr), C =/= $\n -> "  " ++ blank(T, S, K);
blank([$" | T], str, K) -> [$\s | blank(T, code, K)];
blank([$' | T], chr, K) -> [$\s | blank(T, code, K)];
blank([_ | T], S, K) when S =:= str; S =:= chr -> [$\s | blank(T, S, K)];
blank([C | T], S, comment) -> [C | blank(T, S, comment)];
blank([_ | T], S, code) -> [$\s | blank(T, S, code)].

file_names(Line) ->
    [W || [W] <- matches(Line, "(?<![\\w/.-])([a-z_][A-Za-z0-9_]*\\.(?:c|h|erl|hrl|escript|sh|md|mk))\\b")].

%% A file name the tree has (a source, or one `make' wrote), or a
%% header of OTP's or the system's (erl_nif.h, ei.h, stdio.h).
known_file(W) ->
    Names = case get(tree_names) of
                undefined ->
                    Ns = sets:from_list([filename:basename(F) || F <- wild("*") ++ wild(
                        "{port,erlang,include,nif,fuzz,test,bench,doc,scripts,examples,priv}/**")]),
                    put(tree_names, Ns), Ns;
                Ns -> Ns
            end,
    Ei = case code:lib_dir(erl_interface) of
             {error, _} -> [];
             D -> [filename:join(D, "include")]
         end,
    sets:is_element(W, Names) orelse
        lists:any(fun(Dir) -> filelib:is_file(filename:join(Dir, W)) end,
                  [filename:join([code:root_dir(), "usr", "include"]), "/usr/include" | Ei]).

%% The C names a text gives (ks_tier_opts, KS_FIELD, ks_option_decode): each
%% must be in the code of the tree's C sources, not only in comments. A
%% lower-case name with capitals in it is a pattern (ks_cmd_Name), and so is an
%% upper-case one with small letters (KS_FMT_name): not names.
c_names(Line) ->
    [W || [W] <- matches(Line, "(?<![\\w.$/-])((?:ks|KS)_[A-Za-z0-9_]*[A-Za-z0-9])(?![\\w.])"),
          nomatch =:= re:run(W, "^ks_.*[A-Z]"), nomatch =:= re:run(W, "^KS_.*[a-z]")].

c_defined(W) ->
    Names = case get(c_names) of
                undefined ->
                    Code = [blank(lists:flatten(lists:join($\n, [L || {_, L} <- all_lines(F)])), code, code)
                            || F <- c_files()],
                    Ns = sets:from_list([N || C <- Code, [N] <- matches(C, "\\b([A-Za-z_][A-Za-z0-9_]*)")]),
                    put(c_names, Ns), Ns;
                Ns -> Ns
            end,
    sets:is_element(W, Names).

%% Absolute paths of two or more parts not under one of ?SYSTEM_DIRS (a home
%% folder, a tool beside the checkout); not a part of a longer word, a
%% variable's value ($HOME/x, ${D}/x) or a regular expression.
outside_paths(Line) ->
    Re = "(?<![\\w.$}~/\\\\)\\]-])(/[A-Za-z][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.*-]+)+)",
    [P || [P] <- matches(Line, Re),
          nomatch =:= re:run(P, "^/(?:" ?SYSTEM_DIRS ")(?:/|$)")].

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
         ((not in_tree(M) orelse example(M)) andalso
          lists:member({F, A}, M:module_info(functions)))).

%% On another OTP than the docs', an OTP module (not the tree's) found here.
other_otp(M) ->
    erlang:system_info(otp_release) =/= ?DOCS_OTP andalso
        case code:which(M) of
            Path when is_list(Path) -> not in_tree(M);
            _ -> false
        end.

%% The examples' modules (examples/): the profiled code of the docs' transcripts,
%% whose frames are local functions as often as not (tiers_shop:spin/1).
example(M) ->
    {ok, Cwd} = file:get_cwd(),
    lists:prefix(Cwd ++ "/_build/examples/", filename:absname(code:which(M))).

in_tree(M) ->
    {ok, Cwd} = file:get_cwd(),
    lists:prefix(Cwd ++ "/", filename:absname(code:which(M))).

%% Modules named in docs that the build does not have, on purpose.
skipped(M) ->
    case atom_to_list(M) of
        "my_" ++ _ -> {true, "the reader's own code"};
        [_] -> {true, "a made-up module of one letter"};
        _ -> case lists:keyfind(M, 1, ?OPTIONAL) of
                 {M, Why} -> {code:which(M) =:= non_existing, Why};
                 false -> false
             end
    end.

%% The options a line names, each {What, Name, Known}: the keys of a user
%% function's options map, the values of the enum options and of
%% output_format, the flags of `kprof_sink --replay'.
options(Line) ->
    map_keys(Line) ++
        [{"option value", K ++ " => " ++ V, lists:member(list_to_atom(V), kprof_opts:values(list_to_atom(K)))}
         || [K, V] <- matches(Line, "\\b(group|names)\\s*=>\\s*([a-z][a-z0-9_]*)")] ++
        [{"output format", F, is_format(F)}
         || [Fs | _] <- matches(Line, "\\boutput_format\\s*=>\\s*(?|\\[([a-z0-9_, ]*)\\]|([a-z][a-z0-9_]*))"),
            F <- string:lexemes(Fs, ", ")] ++
        replay_flags(Line).

is_format(F) -> F =:= "all" orelse lists:member(list_to_atom(F), kprof_opts:formats()).

%% kprof:Fun(..., #{Key => ...}): the keys of the last map after the call, up to
%% the next call of kprof's on the line.
map_keys(Line) ->
    lists:append([case matches(hd(string:split(After, "kprof:")), "#\\{([^{}]*(?:\\{[^{}]*\\}[^{}]*)*)\\}") of
                      [] -> [];
                      Maps -> [{"option of kprof:" ++ Fun, K, is_option(Mode, K)}
                               || [K] <- matches(lists:last(Maps) , "(?:^|[,\\s])([a-z][a-z0-9_]*)\\s*=>")]
                  end || {Fun, Mode} <- ?OPTION_FUNS,
                         [After] <- matches(Line, "kprof:" ++ Fun ++ "\\((.*)$")]).

is_option(replay, K) -> lists:keymember(list_to_atom(K), 1, kprof_opts:replay());
is_option(Mode, K) -> lists:keymember(list_to_atom(K), 2, kprof_opts:rows(Mode)).

%% `kprof_sink --replay FILE... --flag ...': each flag, and --format's formats.
replay_flags(Line) ->
    Flags = [F || {_, F, _} <- kprof_opts:replay(), F =/= ""],
    case matches(Line, "kprof_sink --replay(.*)$") of
        [[Rest]] ->
            [{"replay flag", "--" ++ F, lists:member(F, Flags) orelse
                  lists:member(string:prefix(F, "no-"), Flags)}
             || [F] <- matches(Rest, "(?:^|\\s)--([a-z][a-z-]*)")] ++
                [{"output format", F, is_format(F)}
                 || [Fs] <- matches(Rest, "--format\\s+([a-z_,]+)"), F <- string:lexemes(Fs, ",")];
        _ -> []
    end.

%% `make Target... VAR=x' in a code span or after a `$ ' prompt, or a line
%% that is only that (and a comment): the words up to the first that is not
%% a target or a variable. A line of prose that starts with the verb is none.
make_words(Line) ->
    Spans = "(?:`|\\$ )make((?:\\s+[A-Za-z0-9_.=/-]+)+)",
    Command = "^\\s*make((?:\\s+[A-Za-z0-9_.=/-]+)+)\\s*(?:#.*)?$",
    lists:append([targets_of(string:lexemes(Ws, " \t"))
                  || Re <- [Spans, Command], [Ws] <- matches(Line, Re)]).

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
