%%% EUnit tests of kprof_opts: the table's bounds, defaults, unknown keys and
%%% formats, and that the modes' checks (kprof_tiers_plan:check/2,
%%% kprof_flame_options:validate/2, kprof_guard:validate_limits/1), which take keys,
%%% bounds and defaults from it, accept exactly each row's values and
%%% refuse every key that is not one of their rows.
-module(kprof_opts_tests).

-include_lib("eunit/include/eunit.hrl").
-include("kprof_options.hrl").

-define(MODES, [tiers, flame, sample, guard, calls]).
-define(TIERS, [{t, [{lists, reverse, 1}]}]).

%% Values on and just past each bound of a row: {accepted, refused}.
edges({_, _, int, Lo, Hi, _, _, _}) ->
    {[Lo] ++ [Hi || Hi =/= infinity], [Lo - 1, 1.0 * Lo] ++ [Hi + 1 || Hi =/= infinity]};
edges({_, _, num, Lo, Hi, _, _, _}) ->
    {[Lo] ++ [Hi || Hi =/= infinity], [Lo - 0.001, x] ++ [Hi + 0.001 || Hi =/= infinity]};
edges({_, _, numx, Lo, Hi, _, _, _}) ->
    {[Lo + 0.001, Hi], [Lo, Hi + 0.001, x]};
edges({_, _, intinf, Lo, Hi, _, _, _}) ->
    {[Lo, infinity] ++ [Hi || Hi =/= infinity], [Lo - 1, 1.5, x] ++ [Hi + 1 || Hi =/= infinity]};
edges({_, _, bool, _, _, _, _, _}) ->
    {[true, false], [0, 1, yes]};
edges({_, K, enum, _, _, _, _, _}) ->
    Values = kprof_opts:values(K),
    {Values, [0, length(Values), true, atom_to_list(hd(Values)), {hd(Values)}, not_a_value]};
edges({_, K, term, _, _, _, _, _}) ->
    term_edges(K).

%% The enum rows' values, as the sink stores them in this order (KS_GROUP_*).
values_test() ->
    ?assertEqual([pid, name, initial_call, all], kprof_opts:values(group)),
    ?assertEqual([erlang, elixir], kprof_opts:values(names)),
    ?assertEqual(["no default, pid | name | initial_call | all)"],
                 [lists:sublist(L, 44) || "group (" ++ L <- kprof_opts:doc(flame)]).

%% kprof:replay/2's options are flame user options; the sink gets the overrides
%% when given; the header's keys are numbered once each.
replay_and_record_keys_test() ->
    Flame = [K || {_, K, _, _, _, _, _, _} <- kprof_opts:rows(flame)],
    Replay = kprof_opts:replay(),
    ?assertEqual([], [K || {K, _, _} <- Replay, not lists:member(K, Flame)]),
    ?assertEqual([group, fold_recursion, names, top, max_bytes, sleep],
                 [K || {K, _, override} <- Replay]),
    ?assertEqual([{info, "", erlang}], [R || {_, _, erlang} = R <- Replay]),
    Ids = [I || {I, _} <- kprof_opts:record_keys()],
    ?assertEqual(lists:seq(1, 18), lists:usort(Ids)),
    ?assertEqual({12, names}, lists:keyfind(12, 1, kprof_opts:record_keys())).

term_edges(entry) -> {[{lists, reverse, 1}, [{lists, reverse, 1}]], [[], lists]};
term_edges(identity) -> {[mfa, {arg, 1}, {arg, 255}, {ms, [{['$1'], [], ['$1']}]}],
                         [{arg, 0}, {arg, 256}, {ms, []}, other]};
term_edges(nodes) -> {[[node()]], [[], [<<"n">>], node()]};
term_edges(full_trace) -> {[false, all, x, [x, y]], [true, [], [x | y]]};
term_edges(output_format) -> {[all, svg, [folded, perf]], [[], jpeg, [svg, jpeg], "svg"]};
term_edges(output_directory) -> {[".", <<"/tmp">>], ["", <<>>, 42]};
term_edges(name) -> {["run"], ["", "a/b", run]};
term_edges(open) -> {[speedscope, browser, false], [true, firefox, "browser"]};
term_edges(progress) -> {[true, false, 1, 5000], [0, -1, 1.5, "yes"]};
term_edges(record) -> {["/tmp/x.rec", <<"/tmp/x.rec">>, "rel.rec"], ["", <<>>, 42, x, [0]]};
term_edges(raw_record) -> term_edges(record);
term_edges(pid) -> {[all, self(), [self()], [self(), self()]], [[], foo, [foo], "<0.1.0>"]};
term_edges(max_memory_bytes) -> {[1, infinity, default], [0, -1, x]};
term_edges(rate) -> {[infinity, {1, 1}], [10, {0, 1}, {1, 0}]}.

user_rows() ->
    lists:usort(lists:append([kprof_opts:rows(M) || M <- ?MODES])).

mode_of({Modes, _, _, _, _, _, _, _}) -> hd(Modes).

bounds_test_() ->
    [{atom_to_list(K), fun() ->
          Mode = mode_of(R),
          {Yes, No} = edges(R),
          [?assertMatch({{ok, #{K := V}}, V}, {kprof_opts:check(Mode, #{K => V}), V}) || V <- Yes],
          [?assertEqual({V, {error, {bad_option, K, V}}}, {V, kprof_opts:check(Mode, #{K => V})})
           || V <- No]
      end} || {_, K, _, _, _, _, _, _} = R <- user_rows()].

sink_rows_are_not_user_options_test() ->
    [?assertEqual({error, {unknown_options, [K]}}, kprof_opts:check(M, #{K => 1}))
     || {Ms, K, _, _, _, _, sink, _} <- ?KPROF_OPTIONS, M <- Ms].

unknown_and_not_a_map_test() ->
    ?assertEqual({error, {unknown_options, [nope]}}, kprof_opts:check(tiers, #{nope => 1})),
    ?assertEqual({error, {unknown_options, [max_depth]}}, kprof_opts:check(tiers, #{max_depth => 9})),
    %% Every unknown key, sorted, before any value is looked at.
    ?assertEqual({error, {unknown_options, [a, b]}},
                 kprof_opts:check(flame, #{b => 2, a => 1, max_bytes => 0})),
    %% The first bad value in key order.
    ?assertEqual({error, {bad_option, gc, x}}, kprof_opts:check(flame, #{max_bytes => 0, gc => x})),
    %% The node and depth counts of before max_bytes are gone, said as unknown.
    ?assertEqual({error, {unknown_options, [max_depth, max_nodes]}},
                 kprof_opts:check(flame, #{max_nodes => 1000000, max_depth => 256})),
    ?assertEqual({error, {bad_options, [x]}}, kprof_opts:check(flame, [x])).

%% The defaults of each mode are the KS_OPTION rows of include/ks_options.h
%% that kprof checks (KS_BY_ERLANG, KS_BY_BOTH) and give one, read here with a
%% pattern of their own (not the generator's parser); a guard row (KS_M_GUARD)
%% is the guard's alone. A few values said here too, as a reader knows them.
defaults_test() ->
    {ok, H} = file:read_file(filename:join([root(), "include", "ks_options.h"])),
    {match, Rows} = re:run(H, "^KS_OPTION\\(([^,]+), (\\w+), \\w+, [^,]+, [^,]+, "
                              "\"((?:[^\"\\\\]|\\\\.)*)\", KS_BY_(ERLANG|BOTH),",
                           [global, multiline, {capture, all_but_first, list}]),
    Mode = fun(Modes) ->
                   case string:find(Modes, "KS_M_GUARD") of
                       nomatch -> [list_to_atom(string:lowercase(string:trim(M) -- "KS_M_"))
                                   || M <- string:split(Modes, "|", all)];
                       _ -> [guard]
                   end
           end,
    Term = fun(D) ->
                   {ok, Ts, _} = erl_scan:string(lists:flatten(string:replace(D, "\\\"", "\"", all)) ++ "."),
                   {ok, T} = erl_parse:parse_term(Ts),
                   T
           end,
    [?assertEqual({M, maps:from_list([{list_to_atom(K), Term(D)}
                                      || [Ms, K, D, _] <- Rows, D =/= "", lists:member(M, Mode(Ms))])},
                  {M, kprof_opts:defaults(M)})
     || M <- [flame, guard, tiers]],
    ?assertMatch(#{output_format := all, output_directory := ".", max_bytes := 2147483648,
                   max_record_bytes := 1073741824, names := erlang},
                 kprof_opts:defaults(flame)),
    ?assertMatch(#{max_lag_ms := 1000, rate := infinity}, kprof_opts:defaults(guard)),
    ?assertMatch(#{sample := 1.0, full_trace := false}, kprof_opts:defaults(tiers)),
    {ok, Filled} = kprof_opts:check(flame, #{max_bytes => 1 bsl 20}),
    ?assertEqual((kprof_opts:defaults(flame))#{max_bytes => 1 bsl 20}, Filled).

%% The formats are the KS_FORMAT rows of include/ks_options.h, read here with a
%% pattern of their own (not the generator's parser), in order; `all' is the
%% rows whose last column is 1.
formats_test() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    Root = filename:dirname(filename:dirname(filename:dirname(Src))),
    {ok, H} = file:read_file(filename:join([Root, "include", "ks_options.h"])),
    {match, Rows} = re:run(H, "^KS_FORMAT\\((\\w+), \"([^\"]*)\", (\\w+), ([01])\\)$",
                           [global, multiline, {capture, all_but_first, list}]),
    ?assert(length(Rows) >= 5),
    ?assertEqual([list_to_atom(N) || [N, _, _, _] <- Rows], kprof_opts:formats()),
    ?assertEqual([list_to_atom(N) || [N, _, _, "1"] <- Rows], kprof_opts:all_formats()),
    ?assertEqual([E || [_, E, _, _] <- Rows],
                 [kprof_opts:extension(F) || F <- kprof_opts:formats()]),
    ?assertEqual(".speedscope.json", kprof_opts:extension(speedscope)),
    ?assertEqual("callgrind.out.x", kprof_opts:file_name(callgrind, "x")),
    [?assertEqual({F, {ok, "kprof-x"}}, {F, kprof_opts:base_name(F, kprof_opts:file_name(F, "kprof-x"))})
     || F <- kprof_opts:formats()],
    ?assertEqual(error, kprof_opts:base_name(svg, "x.folded")),
    ?assertEqual(error, kprof_opts:base_name(svg, ".svg")),
    ?assertEqual(error, kprof_opts:base_name(callgrind, "x.callgrind.out.")),
    ?assertEqual([kprof_opts:file_name(F, "x") || F <- kprof_opts:all_formats()],
                 [filename:basename(P) || P <- kprof_flame:planned_files(
                                                   #{name => "x", output_directory => "/tmp",
                                                     output_format => all})]).

%% What kprof_flame_srv sends the sink: the `both' rows, in table order; never a
%% key only kprof knows (output_format) nor one only kprof sets (hold).
forwarded_test() ->
    F = kprof_opts:forwarded(flame),
    ?assertEqual([K || {_, K, _, _, _, _, both, _} <- kprof_opts:rows(flame)], F),
    [?assert(lists:member(K, F)) || K <- [sleep, gc, children, max_bytes, max_procs, top,
                                          names, group, fold_recursion, callers]],
    [?assertNot(lists:member(K, F)) || K <- [output_format, hold, correct, timeout]],
    ?assert(lists:member(grace_ms, kprof_opts:forwarded(tiers))).

%% The keys Erlang sends the sink come from the table, so they cannot drift
%% from it: with every user option of the tiers given, tiers_start carries
%% exactly the table's sink keys of the tiers (a new `both' or renaming `sink'
%% row is sent without an edit; a `sink' row nothing fills, or a key no row
%% has, fails here). flame_start over its three modes carries the table's sink
%% keys of flame, but max_stack (left at the sink's default).
tiers_sink_keys_test() ->
    Given = maps:from_list([{K, hd(element(1, edges(R)))}
                            || {_, K, _, _, _, _, _, _} = R <- kprof_opts:rows(tiers)]),
    ?assertEqual(false, maps:get(full_trace, Given)),
    Sent = kprof_tiers_plan:sink_opts(Given#{full_trace => all}),
    Keys = [K || {K, _} <- Sent],
    ?assertEqual(lists:usort(Keys), lists:sort(Keys)),
    ?assertEqual(lists:sort([K || {_, K, _, _, _, _, _, _} <- kprof_opts:sink_rows(tiers)]),
                 lists:sort(Keys)),
    ?assertEqual({full_max_events, 1}, lists:keyfind(full_max_events, 1, Sent)),
    ?assertEqual({slow_us, 0}, lists:keyfind(slow_us, 1, Sent)),
    ?assert(lists:member({full_trace_max_nodes, full_max_nodes}, kprof_opts:sent(tiers))),
    %% Nothing given, nothing sent: the sink's defaults are the table's too.
    ?assertEqual([], kprof_tiers_plan:sink_opts(#{})).

flame_sink_keys_test() ->
    %% record has no default: sent only when given.
    Cfg = (kprof_opts:defaults(flame))#{record => "/tmp/x.kprec"},
    PerMode = [[K || {K, _} <- kprof_flame_srv:start_opts(Mode, C)]
               || {Mode, C} <- [{apply, Cfg#{hide => {m, f, 0}}}, {pid, Cfg},
                                {capture, Cfg#{trigger => {m, f, 0}, ncalls => 1}}]],
    Table = [K || {_, K, _, _, _, _, _, _} <- kprof_opts:sink_rows(flame)],
    [?assertEqual(lists:usort(Keys), lists:sort(Keys)) || Keys <- PerMode],
    [?assertEqual([], Keys -- Table) || Keys <- PerMode],
    ?assertEqual(lists:sort(Table -- [max_stack]), lists:usort(lists:append(PerMode))).

sample_sink_keys_test() ->
    %% raw_record has no default: sent only when given; layout and pids when known and asked.
    Cfg = (kprof_opts:defaults(sample))#{raw_record => "/tmp/x.ksr", pids => [self()],
                                         frequency => 97},
    Keys = [K || {K, _} <- kprof_sample:start_opts(Cfg, {0, 4})],
    Table = [K || {_, K, _, _, _, _, _, _} <- kprof_opts:sink_rows(sample)],
    ?assertEqual(lists:usort(Keys), lists:sort(Keys)),
    ?assertEqual([], Keys -- Table),
    %% beacons are the calibration's (kprof_sample:layout/0), not a session's.
    ?assertEqual(lists:sort(Table -- [beacons]), lists:sort(Keys)).

doc_test() ->
    [?assertEqual(length(kprof_opts:rows(M)), length(kprof_opts:doc(M))) || M <- ?MODES],
    ?assert(lists:member("max_bytes (default 2147483648, 65536..1099511627776): memory of the "
                         "call-path tree; paths past it go to OVER_BUDGET frames",
                         kprof_opts:doc(flame))).

%% The table against today's checks, on every edge value of every row.
agree_test_() ->
    [{atom_to_list(K), fun() ->
          {Yes, No} = edges(R),
          [?assertEqual({M, K, V, kprof_opts_ok(M, K, V)}, {M, K, V, today_ok(M, K, V)})
           || V <- Yes ++ No, M <- Modes]
      end} || {Modes, K, _, _, _, _, _, _} = R <- user_rows()].

kprof_opts_ok(M, K, V) ->
    element(1, kprof_opts:check(M, #{K => V})) =:= ok.

%% Only bad_option counts as refused: a value the options accept can still
%% fail later checks (an entry's module, say).
today_ok(tiers, identity, V) ->
    not bad_option(kprof_tiers_plan:check(?TIERS, #{identity => V, entry => {lists, reverse, 1}}));
today_ok(tiers, K, V) ->
    not bad_option(kprof_tiers_plan:check(?TIERS, #{K => V}));
today_ok(flame, K, V) ->
    not bad_option(kprof_flame_options:validate(#{K => V}, apply));
today_ok(guard, K, V) ->
    element(1, kprof_guard:validate_limits(#{K => V})) =:= ok;
today_ok(sample, K, V) ->
    not bad_option(kprof_sample:validate(#{K => V}));
today_ok(calls, K, V) ->
    not bad_option(kprof_calls:validate({lists, seq, 2}, #{K => V})).

bad_option({error, {bad_option, _, _}}) -> true;
bad_option({error, {unknown_options, _}}) -> true;
bad_option(_) -> false.

%% A key that is not one of a mode's rows (another mode's, a sink-only row's,
%% or none) is refused by that mode's own check as unknown.
other_keys_are_unknown_test_() ->
    All = lists:usort([K || {_, K, _, _, _, _, _, _} <- ?KPROF_OPTIONS]) ++ [nope],
    [{atom_to_list(M) ++ " " ++ atom_to_list(K),
      fun() -> ?assertEqual({M, K, {unknown_options, [K]}}, {M, K, mode_check(M, K)}) end}
     || M <- ?MODES, K <- All, not lists:keymember(K, 2, kprof_opts:rows(M))].

mode_check(tiers, K) ->
    {error, R} = kprof_tiers_plan:check(?TIERS, #{K => 1}), R;
mode_check(flame, K) ->
    {error, R} = kprof_flame_options:validate(#{K => 1}, apply), R;
mode_check(sample, K) ->
    {error, R} = kprof_sample:validate(#{K => 1}), R;
mode_check(calls, K) ->
    {error, R} = kprof_calls:validate({lists, seq, 2}, #{K => 1}), R;
mode_check(guard, K) ->
    %% The guard's check takes a mode's whole options and keeps its own keys.
    {ok, L} = kprof_guard:validate_limits(#{K => 1}),
    case maps:is_key(K, L) of
        true -> {bad, K};
        false -> {unknown_options, [K]}
    end.

%% The tree this test was compiled from.
root() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    filename:dirname(filename:dirname(filename:dirname(Src))).
