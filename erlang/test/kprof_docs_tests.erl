%%% @doc The docs a shell user reaches: `h(kprof)' and IEx's `h :kprof'
%%% read the EEP-48 chunks `make' writes to erlang/doc/chunks (through
%%% code:get_doc/1), and kprof:help/0 prints the calls to start with.
-module(kprof_docs_tests).

-include_lib("eunit/include/eunit.hrl").

%% Every module of kprof.app has a module doc, and every function it exports
%% (module_info aside) has a doc, or is marked internal (@private: hidden).
chunks_test_() ->
    _ = application:load(kprof),
    {ok, Mods} = application:get_key(kprof, modules),
    [{atom_to_list(M), fun() -> module_docs(M) end} || M <- Mods].

module_docs(M) ->
    {ok, {docs_v1, _, erlang, _, ModDoc, _, Docs}} = code:get_doc(M),
    ?assertMatch({M, #{<<"en">> := _}}, {M, ModDoc}),
    Exports = [FA || {F, _} = FA <- M:module_info(exports), F =/= module_info],
    Missing = [FA || FA <- Exports, not documented(FA, Docs)],
    ?assertEqual({M, []}, {M, Missing}).

documented({F, A}, Docs) ->
    case [Doc || {{function, F1, A1}, _, _, Doc, _} <- Docs, F1 =:= F, A1 =:= A] of
        [hidden] -> true;
        [#{<<"en">> := Text}] -> Text =/= [] andalso Text =/= <<>>;
        _ -> false
    end.

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
