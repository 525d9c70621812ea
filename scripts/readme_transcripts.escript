#!/usr/bin/env escript
%%! -noshell
%% The docs' shell sessions (?SESSIONS: README.md's first profiles, the shop
%% under the tiers, a flame capture and its recording, call counts, a replay;
%% doc/flame.md's three captures; doc/guard.md's guard tripping) run against
%% the real product, so that what the docs show cannot drift from what the
%% code prints.
%%
%%   scripts/readme_transcripts.escript check   (make readme-check, in make test)
%%       runs each `N> ' input and compares the *shape* of what it printed with
%%       the doc's: the terms (map keys, tuple tags and sizes, atoms, the kind
%%       of each value) and, of a printed table, its first line and the header
%%       lines before the first row (numbers, pids, timestamps and spacing
%%       ignored). Lists each difference; exits 1 if any.
%%   scripts/readme_transcripts.escript write   (make readme-transcripts)
%%       rewrites the outputs in the docs from the run (logger reports, which
%%       the run does not capture, are kept as they were).
%% Run from the top of the tree after `make' (erlang/ebin, _build/shop/ebin).
%% The sessions run in a fresh directory, _build/readme, so the relative paths
%% they give (an output directory, a recording that must not exist yet) are
%% new on every run, as in a fresh clone.
-mode(compile).

%% {File, Section}: the ```erlang blocks of Section (a `## ' heading, up to the
%% next one) are one shell session, its prompts counting from 1.
-define(SESSIONS, [{"README.md", "## First profiles"},
                   {"doc/flame.md", "## A first capture"},
                   {"doc/guard.md", "## A session: the guard trips"}]).
-define(RUN_DIR, "_build/readme").
%% The guard part depends on the machine's load: the limit that trips first (the
%% lag, or the port not answering), and when (a loaded machine can lag 2 ms
%% before the doc's request has started, and the report then has no request).
%% A run where another limit tripped, or of the guard's session that printed
%% another shape, is run again, up to this many times; another limit in the
%% last is said loudly, another shape fails. Elsewhere a difference in shape
%% fails at once.
-define(ATTEMPTS, 3).
-define(LOAD_DEPENDENT, ["doc/guard.md"]).

main([Mode]) when Mode =:= "check"; Mode =:= "write" ->
    code:add_pathsa([filename:absname(D) || D <- ["erlang/ebin", "_build/shop/ebin"]]),
    Docs = [{doc_lines(File), Section} || {File, Section} <- ?SESSIONS],
    {ok, Top} = file:get_cwd(),
    put(top, Top),
    _ = file:del_dir_r(?RUN_DIR),
    ok = filelib:ensure_dir(filename:join(?RUN_DIR, "x")),
    ok = file:set_cwd(?RUN_DIR),
    case Mode of
        "check" ->
            Failed = [Doc || {Doc, Section} <- Docs,
                             check(Doc, prompts(Doc, Section), ?ATTEMPTS) =:= failed],
            halt(case Failed of [] -> 0; _ -> 1 end);
        "write" ->
            [write(Doc, Ps, session(Ps)) || {Doc, Section} <- Docs, Ps <- [prompts(Doc, Section)]],
            halt(0)
    end;
main(_) ->
    io:format(standard_error, "usage: scripts/readme_transcripts.escript check|write~n", []),
    halt(2).

%%% The docs' prompts

%% A doc's lines, read by its absolute name (the run changes directory).
doc_lines(File) ->
    {ok, Bin} = file:read_file(File),
    {filename:absname(File), string:split(unicode:characters_to_list(Bin), "\n", all)}.

%% {InputText, FirstLineNo, LastInputLineNo, LastOutputLineNo, OutputLines} of
%% each prompt of the ```erlang blocks of the section, in order.
prompts({File, Lines}, Heading) ->
    Numbered = lists:zip(lists:seq(1, length(Lines)), Lines),
    Section = section(Numbered, File, Heading),
    [{Text, N, Last, OutEnd, Out}
     || {_, Text, N, Last, OutEnd, Out}
            <- one_session(lists:append([block_prompts(B) || B <- erlang_blocks(Section)]), 0)].

%% The session ends where the prompts count again from a lower number (the
%% PostgreSQL aside starts a new shell).
one_session([{No, _, _, _, _, _} = P | Rest], Last) ->
    case No > Last of
        true -> [P | one_session(Rest, No)];
        false -> []
    end;
one_session([], _) -> [].

section(Numbered, File, Heading) ->
    case lists:dropwhile(fun({_, L}) -> L =/= Heading end, Numbered) of
        [_ | After] -> lists:takewhile(fun({_, L}) -> not lists:prefix("## ", L) end, After);
        [] -> io:format("~s: no section ~s~n", [File, Heading]),
              halt(1)
    end.

erlang_blocks([]) -> [];
erlang_blocks([{_, "```erlang"} | Rest]) ->
    {Block, [{_, "```" ++ _} | After]} =
        lists:splitwith(fun({_, L}) -> not lists:prefix("```", L) end, Rest),
    [Block | erlang_blocks(After)];
erlang_blocks([_ | Rest]) -> erlang_blocks(Rest).

block_prompts([]) -> [];
block_prompts([{N, L} | _] = Block) ->
    case prompt_no(L) of
        false -> [];   % a block of input only (no session)
        P ->
            {Input, Rest} = lists:splitwith(fun({_, X}) -> prompt_no(X) =:= P end, Block),
            {Output, Next} = lists:splitwith(fun({_, X}) -> prompt_no(X) =:= false end, Rest),
            Text = lists:join("\n", [strip_prompt(X) || {_, X} <- Input]),
            Last = element(1, lists:last(Input)),
            OutEnd = case Output of [] -> Last; _ -> element(1, lists:last(Output)) end,
            [{list_to_integer(P), lists:flatten(Text), N, Last, OutEnd, [X || {_, X} <- Output]}
             | block_prompts(Next)]
    end.

prompt_no(L) ->
    case re:run(L, "^(\\d+)> ", [{capture, all_but_first, list}]) of
        {match, [P]} -> P;
        nomatch -> false
    end.

strip_prompt(L) -> re:replace(L, "^\\d+> ", "", [{return, list}]).

%%% The run: one process, its bindings kept from prompt to prompt, as the shell does

session(Prompts) ->
    put(bindings, erl_eval:new_bindings()),
    [run(P) || P <- Prompts].

run({Input, _, _, _, _}) ->
    Bindings = get(bindings),
    {ok, Tokens, _} = erl_scan:string(Input),
    {ok, Exprs} = erl_parse:parse_exprs(Tokens),
    Capture = spawn_link(fun() -> capture([]) end),
    Old = group_leader(),
    group_leader(Capture, self()),
    put(flushed, []),
    {value, Value, NewB} = erl_eval:exprs(Exprs, Bindings, {value, fun shell_fun/2}),
    group_leader(Old, self()),
    put(bindings, NewB),
    Capture ! {text, self()},
    Text = receive {text, T} -> T end,
    {Text, lists:reverse(get(flushed)), Value}.

%% The shell's own commands the session uses.
shell_fun(flush, []) ->
    receive M ->
            put(flushed, [M | get(flushed)]),
            io:format("Shell got ~p~n", [M]),
            shell_fun(flush, [])
    after 0 -> ok
    end.

%% A group leader that keeps what is printed.
capture(Acc) ->
    receive
        {io_request, From, Ref, Req} ->
            {Reply, Acc1} = io_request(Req, Acc),
            From ! {io_reply, Ref, Reply},
            capture(Acc1);
        {text, Pid} -> Pid ! {text, lists:flatten(lists:reverse(Acc))}
    end.

io_request({put_chars, Enc, Chars}, Acc) ->
    {ok, [unicode:characters_to_list(Chars, Enc) | Acc]};
io_request({put_chars, Enc, M, F, A}, Acc) ->
    io_request({put_chars, Enc, apply(M, F, A)}, Acc);
io_request({requests, Rs}, Acc) ->
    lists:foldl(fun(R, {_, A}) -> io_request(R, A) end, {ok, Acc}, Rs);
io_request(getopts, Acc) -> {[{encoding, unicode}], Acc};
io_request({get_geometry, _}, Acc) -> {{error, enotsup}, Acc};
io_request(_, Acc) -> {{error, request}, Acc}.

%%% Check

check({File, _}, Prompts, Left) ->
    Runs = session(Prompts),
    put(notes, []),
    Diffs = lists:append([compare(P, R) || {P, R} <- lists:zip(Prompts, Runs)]),
    Notes = lists:reverse(get(notes)),
    Name = relative(File),
    Again = Left > 1 andalso lists:member(Name, ?LOAD_DEPENDENT),
    [io:format("~s:~b: ~s~n", [Name, N, D]) || {N, D} <- Diffs],
    io:format("readme-check: ~s: ~b prompts run, ~b differences in shape~n",
              [Name, length(Prompts), length(Diffs)]),
    case {Diffs, Notes, Left} of
        {[], [], _} -> ok;
        {[], _, 1} ->
            %% Said loudly: under load the port's stall bound can trip before the lag.
            [io:format("readme-check: NOT CHECKED: ~s (the machine's load chose the limit; "
                       "the guard's info for the doc's limit was not compared)~n", [N])
             || N <- Notes],
            ok;
        {[_ | _], _, _} when not Again -> failed;
        _ -> [io:format("readme-check: ~s~n", [N]) || N <- Notes],
             io:format("readme-check: again (~b runs left)~n", [Left - 1]),
             check({File, []}, Prompts, Left - 1)
    end.

%% A doc's name from the top of the tree (the run is in ?RUN_DIR).
relative(File) ->
    case string:prefix(File, get(top) ++ "/") of
        nomatch -> File;
        Rel -> Rel
    end.

compare({Input, N, _, _, Out}, {LiveText, LiveFlushed, LiveValue}) ->
    {Text, Flushed, ValueText} = split_output(without_reports(Out)),
    Where = fun(D) -> {N, io_lib:format("~s: ~s", [first_line(Input), D])} end,
    ValueDiffs = case parse_term(ValueText) of
                     {ok, V} -> diff(shape(V), shape(LiveValue), "value");
                     error -> ["the doc's value does not parse: " ++ ValueText]
                 end,
    FlushDiffs = case length(Flushed) =:= length(LiveFlushed) of
                     true -> lists:append([diff(shape(A), shape(B), "message")
                                           || {A, B} <- lists:zip(Flushed, LiveFlushed)]);
                     false -> [io_lib:format("~b messages flushed, the doc shows ~b",
                                             [length(LiveFlushed), length(Flushed)])]
                 end,
    TextDiffs = case {headers(Text), headers(without_flushed(LiveText))} of
                    {H, H} -> [];
                    {H, L} -> [io_lib:format("printed headers ~p, the doc shows ~p; printed:~n~ts",
                                             [L, H, LiveText])]
                end,
    [Where(D) || D <- ValueDiffs ++ FlushDiffs ++ TextDiffs].

first_line(Input) -> hd(string:split(Input, "\n")).

%% Logger reports (=WARNING REPORT==== ...) go to the node's console, not to the
%% session's group leader: not compared.
without_reports([]) -> [];
without_reports(["=" ++ _ = L | Rest]) ->
    case string:find(L, " REPORT====") of
        nomatch -> [L | without_reports(Rest)];
        _ -> without_reports(report_body(Rest))
    end;
without_reports([L | Rest]) -> [L | without_reports(Rest)].

report_body([[C | _] | Rest]) when C =:= $\s -> report_body_indented(Rest);
report_body([_Message | Rest]) -> Rest;    % a one-line report
report_body([]) -> [].

report_body_indented([[$\s | _] | Rest]) -> report_body_indented(Rest);
report_body_indented(["" | Rest]) -> Rest;
report_body_indented(Rest) -> Rest.

%% The doc's output of a prompt: {printed text, flushed terms, value text}:
%% the value is the longest tail of lines that parses as one term.
split_output(Lines) ->
    split_output(Lines, 0).

split_output(Lines, I) when I >= length(Lines) -> {"", [], ""};
split_output(Lines, I) ->
    {Text, Value} = lists:split(I, Lines),
    VText = lists:flatten(lists:join("\n", Value)),
    case parse_term(VText) of
        {ok, _} ->
            TText = lists:flatten(lists:join("\n", Text)),
            {without_flushed(TText), flushed(TText), VText};
        error -> split_output(Lines, I + 1)
    end.

flushed(Text) ->
    [T || "Shell got " ++ Chunk <- chunks(Text), {ok, T} <- [parse_term(Chunk)]].

without_flushed(Text) ->
    lists:flatten([C || C <- chunks(Text), not lists:prefix("Shell got ", C)]).

%% Text cut before each "Shell got ".
chunks(Text) ->
    case string:split(Text, "Shell got ") of
        [Before, After] ->
            [Rest | More] = chunks(After),
            [Before, "Shell got " ++ Rest | More];
        [All] -> [All]
    end.

parse_term(Text0) ->
    Text = re:replace(Text0, "<\\d+\\.\\d+\\.\\d+>", "'$pid'", [global, {return, list}]),
    case erl_scan:string(Text ++ ".") of
        {ok, Tokens, _} ->
            case erl_parse:parse_term(Tokens) of
                {ok, T} -> {ok, T};
                _ -> error
            end;
        _ -> error
    end.

%% A table's first line and its header lines up to the first row with a number,
%% numbers, timestamps, pids and spacing ignored. The report's `dropped:' line
%% is printed only when the run dropped something (which caps a run reaches
%% depends on the machine's speed, as its numbers do), so it is left out.
headers(Text) ->
    Lines = [normal(L) || L <- string:split(Text, "\n", all), string:trim(L) =/= "",
                          not lists:prefix("dropped:", string:trim(L))],
    case Lines of
        [] -> [];
        [First | Rest] -> [First | lists:takewhile(fun(L) -> string:find(L, "#") =:= nomatch end, Rest)]
    end.

normal(L0) ->
    Subs = [{"tracing ABORTED: (\\w+) \\(.*\\) at ", "tracing ABORTED: \\1 (...) at "},
            {"\\d{4}-\\d\\d-\\d\\dT[0-9:.]+(Z|[+-]\\d\\d:\\d\\d)?", "T"},
            {"<\\d+\\.\\d+\\.\\d+>", "P"},
            {"(?<![A-Za-z_#])\\d+(\\.\\d+)?(e[+-]?\\d+)?", "#"},
            {"\\s+", " "}],
    L = lists:foldl(fun({Re, To}, Acc) -> re:replace(Acc, Re, To, [global, {return, list}]) end,
                    L0, Subs),
    string:trim(L).

%% The shape of a term: what stays the same from run to run.
shape(T) when is_pid(T); T =:= '$pid' -> pid;
shape(T) when is_port(T) -> port;
shape(T) when is_reference(T) -> ref;
shape(T) when is_number(T) -> number;
shape(T) when is_binary(T) -> binary;
shape(T) when is_atom(T) -> {atom, T};
shape(T) when is_map(T) -> {map, maps:map(fun(_, V) -> shape(V) end, T)};
shape(T) when is_tuple(T) -> {tuple, [shape(E) || E <- tuple_to_list(T)]};
shape([]) -> {list, []};
shape(T) when is_list(T) ->
    case io_lib:printable_unicode_list(T) of
        true -> string;
        false -> {list, lists:usort([shape(E) || E <- T])}
    end.

%% Differences between the doc's shape (A) and the run's (B), by path.
diff(S, S, _) -> [];
diff({map, #{what := {atom, Wa}}}, {map, #{what := {atom, Wb}}}, Path) when Wa =/= Wb ->
    %% The guard's info for another limit than the doc's: not comparable.
    put(notes, [io_lib:format("~s: the guard tripped on ~p, the doc shows ~p", [Path, Wb, Wa])
                | get(notes)]),
    [];
diff({map, A}, {map, B}, Path) ->
    Ka = maps:keys(A), Kb = maps:keys(B),
    [io_lib:format("~s: key ~p printed, not in the doc", [Path, K]) || K <- Kb -- Ka] ++
    [io_lib:format("~s: key ~p in the doc, not printed", [Path, K]) || K <- Ka -- Kb] ++
    lists:append([diff(maps:get(K, A), maps:get(K, B), io_lib:format("~s.~p", [Path, K]))
                  || K <- Ka, lists:member(K, Kb)]);
diff({tuple, A}, {tuple, B}, Path) when length(A) =:= length(B) ->
    lists:append([diff(X, Y, io_lib:format("~s/~b", [Path, I]))
                  || {I, X, Y} <- lists:zip3(lists:seq(1, length(A)), A, B)]);
diff({list, []}, {list, _}, _) -> [];      % an empty list where the run had
diff({list, _}, {list, []}, _) -> [];      % elements, or the reverse: not a shape
diff({list, [A]}, {list, [B]}, Path) -> diff(A, B, Path ++ "[]");
diff(string, {list, []}, _) -> [];
diff({list, []}, string, _) -> [];
diff(A, B, Path) -> [io_lib:format("~s: printed ~s, the doc shows ~s", [Path, show(B), show(A)])].

show(S) -> io_lib:format("~P", [S, 8]).

%%% Write

write({File, Lines}, Prompts, Runs) ->
    Arr = list_to_tuple(Lines),
    Replaced = replace(1, Arr, lists:zip(Prompts, Runs), []),
    ok = file:write_file(File, unicode:characters_to_binary(lists:join("\n", Replaced))),
    io:format("readme-transcripts: ~s: ~b prompts run, rewritten~n", [relative(File), length(Prompts)]).

replace(I, Arr, _, Acc) when I > tuple_size(Arr) -> lists:reverse(Acc);
replace(I, Arr, [{{_, _, Last, OutEnd, Out}, {Text, _, Value}} | More], Acc) when I > Last ->
    %% I is the first output line of this prompt (Last < I).
    Kept = kept_reports(Out),
    New = string:split(string:trim(Text, trailing, "\n"), "\n", all) -- [""],
    Val = string:split(lists:flatten(io_lib_pretty:print(Value, [{column, 1}, {line_length, 80},
                                                                  {encoding, unicode}])),
                       "\n", all),
    replace(OutEnd + 1, Arr, More, lists:reverse(Kept ++ New ++ Val) ++ Acc);
replace(I, Arr, Prompts, Acc) ->
    replace(I + 1, Arr, Prompts, [element(I, Arr) | Acc]).

kept_reports([]) -> [];
kept_reports(["=" ++ _ = L | Rest]) ->
    case string:find(L, " REPORT====") of
        nomatch -> kept_reports(Rest);
        _ -> N = length(Rest) - length(report_body(Rest)),
             [L | lists:sublist(Rest, N)] ++ kept_reports(lists:nthtail(N, Rest))
    end;
kept_reports([_ | Rest]) -> kept_reports(Rest).
