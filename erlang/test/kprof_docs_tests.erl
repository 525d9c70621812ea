%%% @doc The docs a shell user reaches: `h(kprof)' and IEx's `h :kprof'
%%% read the EEP-48 chunks `make' writes to erlang/doc/chunks (through
%%% code:get_doc/1), and kprof:help/0 prints the calls to start with.
-module(kprof_docs_tests).

-include_lib("eunit/include/eunit.hrl").

%% Every module of kprof.app has a module doc, and every function it exports
%% (module_info aside) has a doc, or is marked internal (@private). edoc's
%% chunk lists an @private function as `hidden' up to OTP 28 and leaves it out
%% from OTP 29 (ten modules' chunks lacked their callbacks there): a function
%% the chunk lacks must then be @private in its source.
chunks_test_() ->
    _ = application:load(kprof),
    {ok, Mods} = application:get_key(kprof, modules),
    [{atom_to_list(M), fun() -> module_docs(M) end} || M <- Mods].

module_docs(M) ->
    {ok, {docs_v1, _, erlang, _, ModDoc, _, Docs}} = code:get_doc(M),
    ?assertMatch({M, #{<<"en">> := _}}, {M, ModDoc}),
    Exports = [FA || {F, _} = FA <- M:module_info(exports), F =/= module_info],
    Missing = [FA || FA <- Exports, not documented(FA, Docs, M)],
    ?assertEqual({M, []}, {M, Missing}).

documented({F, A}, Docs, M) ->
    case [Doc || {{function, F1, A1}, _, _, Doc, _} <- Docs, F1 =:= F, A1 =:= A] of
        [hidden] -> true;
        [#{<<"en">> := Text}] -> Text =/= [] andalso Text =/= <<>>;
        [] -> private(M, F, A);
        _ -> false
    end.

%% The comment above F/A's first clause in M's source (after the form before
%% it) says @private.
private(M, F, A) ->
    Compiled = M:module_info(compile),
    Src = proplists:get_value(source, Compiled),
    Incs = [D || {i, D} <- proplists:get_value(options, Compiled, [])],
    {ok, Forms} = epp:parse_file(Src, [{includes, Incs}]),
    Starts = lists:usort([erl_anno:line(element(2, Fm)) || Fm <- Forms, form_before(Fm)]),
    case [erl_anno:line(Anno) || {function, Anno, F1, A1, _} <- Forms, F1 =:= F, A1 =:= A] of
        [Line] ->
            Before = lists:last([0 | [L || L <- Starts, L < Line]]),
            {ok, Bin} = file:read_file(Src),
            Lines = lists:sublist(binary:split(Bin, <<"\n">>, [global]), Before + 1, Line - Before - 1),
            lists:any(fun(L) -> nomatch =/= binary:match(L, <<"@private">>) andalso
                                    nomatch =/= binary:match(L, <<"%">>) end, Lines);
        _ ->
            false
    end.

%% A form that ends the comment of the function after it (its spec does not).
form_before({function, _, _, _, _}) -> true;
form_before({attribute, _, Kind, _}) -> not lists:member(Kind, [spec, type, opaque, file]);
form_before(_) -> false.

%% What h(kprof, flame_apply, 2) prints: the doc's text, not "no documentation".
%% (shell_docs asks its group leader for the terminal's options: the node's
%% `user' answers, EUnit's does not.)
shell_render_test() ->
    {ok, Docs} = code:get_doc(kprof),
    Text = with_user(fun() -> shell_docs:render(kprof, flame_apply, 2, Docs) end),
    ?assertNotEqual(nomatch, string:find(Text, "traced from just before the call")),
    ModText = with_user(fun() -> shell_docs:render(kprof, Docs) end),
    ?assertNotEqual(nomatch, string:find(ModText, "flame_apply")),
    ?assertEqual(nomatch, string:find(ModText, "no documentation")).

with_user(Fun) ->
    Self = self(),
    Pid = spawn(fun() ->
                        group_leader(whereis(user), self()),
                        Self ! {rendered, self(), unicode:characters_to_list(Fun())}
                end),
    receive {rendered, Pid, Text} -> Text after 10000 -> error(no_render) end.

%% kprof:help/0: about 20 lines, and every kprof:Function( it names exists.
help_test() ->
    Text = unicode:characters_to_list(kprof_test_util:capture_io(fun kprof:help/0)),
    Lines = string:split(string:trim(Text, trailing), "\n", all),
    ?assert(length(Lines) >= 15 andalso length(Lines) =< 25),
    {match, Named} = re:run(Text, "kprof:([a-z_]+)\\(", [global, {capture, all_but_first, list}]),
    Exported = [atom_to_list(F) || {F, _} <- kprof:module_info(exports)],
    ?assertEqual([], [F || [F] <- Named, not lists:member(F, Exported)]),
    ?assert(length(Named) >= 10).

%% kprof:help(Mode): a line per option the mode takes, from the option table,
%% each naming its key and its default as the table has them.
help_modes_test() ->
    [begin
         Text = unicode:characters_to_list(kprof_test_util:capture_io(fun() -> kprof:help(Mode) end)),
         [_Header | Lines] = string:split(string:trim(Text, trailing), "\n", all),
         Rows = kprof_opts:rows(Mode),
         ?assertEqual({Mode, length(Rows)}, {Mode, length(Lines)}),
         [?assertEqual({Mode, K, true},
                       {Mode, K, lists:prefix("  " ++ atom_to_list(K) ++ " (", L)})
          || {{_, K, _, _, _, _, _, _}, L} <- lists:zip(Rows, Lines)]
     end || Mode <- [tiers, flame, calls, guard]],
    Calls = unicode:characters_to_list(kprof_test_util:capture_io(fun() -> kprof:help(calls) end)),
    ?assertNotEqual(nomatch, string:find(Calls, "  ms (default 5000, 1.. or infinity): ")).
