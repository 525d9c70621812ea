%%% EUnit tests of kprof_names: functions named as Erlang and as Elixir
%%% print them.
-module(kprof_names_tests).

-include_lib("eunit/include/eunit.hrl").

erlang_test() ->
    ?assertEqual("lists:seq/2", kprof_names:mfa({lists, seq, 2}, erlang)),
    ?assertEqual("Elixir.Enum:sum/1", kprof_names:mfa({'Elixir.Enum', sum, 1}, erlang)),
    ?assertEqual("undefined", kprof_names:mfa(undefined, erlang)).

elixir_test() ->
    E = fun(MFA) -> kprof_names:mfa(MFA, elixir) end,
    ?assertEqual("Enum.sum/1", E({'Elixir.Enum', sum, 1})),
    ?assertEqual("String.Chars.Integer.to_string/1",
                 E({'Elixir.String.Chars.Integer', to_string, 1})),
    ?assertEqual(":lists.seq/2", E({lists, seq, 2})),
    ?assertEqual("Keyword.valid?/1", E({'Elixir.Keyword', 'valid?', 1})),
    ?assertEqual("Kernel.raise!/0", E({'Elixir.Kernel', 'raise!', 0})),
    %% What Elixir quotes: compiler-made names, odd modules.
    ?assertEqual("Enum.\"-map/2-fun-0-\"/3", E({'Elixir.Enum', '-map/2-fun-0-', 3})),
    ?assertEqual(":\"my-mod\".f/0", E({'my-mod', f, 0})),
    ?assertEqual("A.\"Elixir\"/1", E({'Elixir.A', 'Elixir', 1})),
    ?assertEqual(":a.\"say \\\"hi\\\"\"/0", E({a, 'say "hi"', 0})),
    ?assertEqual("{x}", E({x})).

%% The top table names its functions in the style asked for.
top_text_test() ->
    Rows = kprof_top:rows([{{'Elixir.Enum', sum, 1}, 3, 2000, 1000},
                           {{lists, seq, 2}, 1, 500, 500}], 4),
    Info = #{total_us => 4, functions => 2},
    ErlText = lists:flatten(io_lib:format("~ts", [kprof_top:text(Rows, Info)])),
    ExText = lists:flatten(io_lib:format("~ts", [kprof_top:text(Rows, Info#{names => elixir})])),
    ?assertMatch({match, _}, re:run(ErlText, "  Elixir\\.Enum:sum/1\\n")),
    ?assertMatch({match, _}, re:run(ErlText, "  lists:seq/2\\n")),
    ?assertMatch({match, _}, re:run(ExText, "  Enum\\.sum/1\\n")),
    ?assertMatch({match, _}, re:run(ExText, "  :lists\\.seq/2\\n")),
    %% 1000 ns of 4 us: 25 %.
    ?assertMatch([#{self_pct := 25.0, self_us := 1, inclusive_us := 2, calls := 3} | _], Rows).
