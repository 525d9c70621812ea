%%% @doc What one web capture costs the node (`make bench-web', issue 26):
%%% with about 10,000 and about 100,000 functions loaded, the two ways
%%% kprof_flame_srv handles the call pattern every capture needs, side by
%%% side in one run:
%%%
%%% <ul>
%%% <li>`toggle' (`keep_patterns_ms => 0', what every web capture did
%%%     before): the pattern is set on every function when the capture opens
%%%     and cleared when it closes;</li>
%%% <li>`keep' (`keep_patterns_ms => 1000', the default): the pattern stays
%%%     a second after the last capture; captures a `Gap' apart find it set.</li>
%%% </ul>
%%%
%%% Each round runs one capture as a traced request does
%%% (`kprof_flame_web:run/2', folded file, the gate's defaults but no rate)
%%% and takes: `start', from the call to the traced function's first line
%%% (a `keep' round comes `Gap' ms after an unmeasured capture, a `toggle'
%%% round finds no pattern);
%%% `first call', the traced function's one call of a small function; `stop',
%%% from its return to run/2's (tracing off, the file written); the worst
%%% stall meanwhile of another process that sleeps 1 ms in a loop (how long
%%% the node stopped it, minus its 1 ms). Rounds `Gap' ms apart, modes
%%% interleaved, medians. Then what keeping the pattern costs everyone else:
%%% an untraced process's call-heavy work (compiling a module of 300
%%% functions) with the pattern set and without, and the stall of the timer's
%%% clear. The modules are made here, outside the repository, into
%%% `GenDir' (kept: the next run loads them). Not a test: nothing fails on a
%%% number. Rewrites the "Web capture cost" section of bench/RESULTS.md.
-module(web_bench).

-export([main/1, first/1, sleeper/2]).

-define(PER_MODULE, 500).

%% The function the traced request calls.
first(X) -> X + 1.

main([RoundsS, GapS, GenDir, Results]) ->
    Rounds = list_to_integer(RoundsS),
    Gap = list_to_integer(GapS),
    Out = filename:join(GenDir, "out"),
    ok = filelib:ensure_path(Out),
    ok = kprof:start(#{}),
    {ok, _} = application:ensure_all_started(inets),
    {module, _} = code:ensure_loaded(?MODULE),
    Load0 = overhead_bench:load_average(),
    Sizes = [10000, 100000],
    Rows = lists:append([size_rows(Target, Rounds, Gap, GenDir, Out) || Target <- Sizes]),
    Load1 = overhead_bench:load_average(),
    Text = text(Rows, Rounds, Gap, Load0, Load1),
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, "Web capture cost", Text),
    halt(0).

%% The node brought to Target functions, then both modes, rounds interleaved.
size_rows(Target, Rounds, Gap, GenDir, Out) ->
    Funs = load_to(Target, GenDir),
    Runs = [{Mode, round(Mode, Gap, Out)} || _ <- lists:seq(1, Rounds), Mode <- [toggle, keep]],
    Cost = keep_cost(Out),
    [{Funs, Mode, [R || {M, R} <- Runs, M =:= Mode], Cost} || Mode <- [toggle, keep]].

%% Each round starts as its mode would find the node: `toggle' with no
%% pattern (cleared, unmeasured, first), `keep' Gap ms after another capture
%% (unmeasured), whose pattern is still kept.
round(Mode, Gap, Out) ->
    Keep = case Mode of toggle -> 0; keep -> 1000 end,
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity, keep_patterns_ms => Keep}),
    ok = kprof_flame_srv:release_patterns(),
    _ = Mode =:= keep andalso
        kprof_flame_web:run(fun() -> ok end, #{output_directory => Out, output_format => folded}),
    timer:sleep(Gap),
    Sleeper = spawn(?MODULE, sleeper, [self(), 0]),
    timer:sleep(20),
    T0 = now_us(),
    {{T1, T2}, _Files} =
        kprof_flame_web:run(fun() ->
                                    A = now_us(),
                                    _ = ?MODULE:first(1),
                                    {A, now_us()}
                            end, #{output_directory => Out, output_format => folded}),
    T3 = now_us(),
    timer:sleep(20),
    Stall = stall(Sleeper),
    _ = [file:delete(F) || F <- filelib:wildcard(filename:join(Out, "kprof-http-*"))],
    #{start => T1 - T0, first => T2 - T1, stop => T3 - T2, stall => Stall}.

%% What the kept pattern costs others: an untraced process's compile, with
%% the pattern kept (just after a capture) and without; the timer's clear.
keep_cost(Out) ->
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity, keep_patterns_ms => 5000}),
    Work = fun() -> {T, _} = timer:tc(fun compile_work/0), T end,
    _ = Work(),
    Pairs = [begin
                 _ = kprof_flame_web:run(fun() -> ok end, #{output_directory => Out,
                                                             output_format => folded}),
                 On = Work(),
                 ok = kprof_flame_srv:release_patterns(),
                 Off = Work(),
                 {On, Off}
             end || _ <- lists:seq(1, 5)],
    %% The clear when the window ends, seen by another process.
    ok = application:set_env(kprof, allow_tracing, #{rate => infinity, keep_patterns_ms => 300}),
    _ = kprof_flame_web:run(fun() -> ok end, #{output_directory => Out, output_format => folded}),
    Sleeper = spawn(?MODULE, sleeper, [self(), 0]),
    timer:sleep(600),
    Clear = stall(Sleeper),
    _ = [file:delete(F) || F <- filelib:wildcard(filename:join(Out, "kprof-http-*"))],
    #{on => median([On || {On, _} <- Pairs]), off => median([Off || {_, Off} <- Pairs]),
      ratio => median([On / Off || {On, Off} <- Pairs]), clear_stall => Clear}.

compile_work() ->
    {ok, _, _} = compile:forms(forms(gen_work, 300), [binary, nowarn_export_all]).

%% Sleeps 1 ms at a time; its worst lateness, in µs, when asked.
sleeper(Parent, Worst) ->
    T = now_us(),
    receive
        {stop, From} -> From ! {stall, self(), Worst}
    after 1 ->
            sleeper(Parent, max(Worst, now_us() - T - 1000))
    end.

stall(Sleeper) ->
    Sleeper ! {stop, self()},
    receive {stall, Sleeper, W} -> W end.

%% Modules of ?PER_MODULE functions until the node has Target functions.
load_to(Target, GenDir) ->
    load_to(Target, GenDir, funs(), 1).

load_to(Target, _GenDir, Funs, _I) when Funs >= Target ->
    Funs;
load_to(Target, GenDir, _Funs, I) ->
    Mod = list_to_atom("kprof_webgen_" ++ integer_to_list(I)),
    case code:is_loaded(Mod) of
        {file, _} ->
            ok;
        false ->
            Beam = filename:join(GenDir, atom_to_list(Mod) ++ ".beam"),
            Bin = case file:read_file(Beam) of
                      {ok, B} ->
                          B;
                      {error, _} ->
                          {ok, Mod, B} = compile:forms(forms(Mod, ?PER_MODULE),
                                                       [nowarn_export_all]),
                          ok = file:write_file(Beam, B),
                          B
                  end,
            {module, Mod} = code:load_binary(Mod, Beam, Bin)
    end,
    load_to(Target, GenDir, funs(), I + 1).

forms(Mod, N) ->
    [{attribute, 1, module, Mod}, {attribute, 1, compile, export_all}
     | [{function, 1, list_to_atom("f" ++ integer_to_list(J)), 1,
         [{clause, 1, [{var, 1, 'X'}], [],
           [{op, 1, '+', {var, 1, 'X'}, {integer, 1, J}}]}]} || J <- lists:seq(1, N)]].

funs() ->
    lists:sum([length(M:module_info(functions)) || {M, _} <- code:all_loaded()]).

now_us() -> erlang:monotonic_time(microsecond).

median(L) ->
    lists:nth((length(L) + 1) div 2, lists:sort(L)).

text(Rows, Rounds, Gap, Load0, Load1) ->
    Head = ["| functions loaded | pattern | start (ms) | first call (us) | stop (ms) "
            "| worst stall of another process (ms) |\n",
            "|--:|---|--:|--:|--:|--:|\n"],
    Lines = [io_lib:format("| ~b | ~s | ~.1f | ~b | ~.1f | ~.1f |~n",
                           [Funs, label(Mode), ms(med(start, Rs)), med(first, Rs),
                            ms(med(stop, Rs)), ms(med(stall, Rs))])
             || {Funs, Mode, Rs, _} <- Rows],
    Ratios = [io_lib:format("| ~b | ~.1f | ~.1f | ~.2f | ~.1f |~n",
                            [Funs, ms(On), ms(Off), Ratio, ms(Clear)])
              || {Funs, keep, _, #{on := On, off := Off, ratio := Ratio,
                                   clear_stall := Clear}} <- Rows],
    Speed = [begin
                 T = [R || {F, toggle, R, _} <- Rows, F =:= Funs],
                 K = [R || {F, keep, R, _} <- Rows, F =:= Funs],
                 io_lib:format("~b functions: start ~.1fx, stop ~.1fx, stall ~.1fx faster kept "
                               "than toggled.~n",
                               [Funs, ratio(med(start, hd(T)), med(start, hd(K))),
                                ratio(med(stop, hd(T)), med(stop, hd(K))),
                                ratio(med(stall, hd(T)), med(stall, hd(K)))])
             end || {Funs, keep, _, _} <- Rows],
    [Head, Lines,
     io_lib:format("~nMedians of ~b rounds per row, ~b ms apart, the two modes interleaved; one "
                   "traced request each (kprof_flame_web:run/2, a folded file). `toggle': "
                   "keep_patterns_ms => 0, the pattern set and cleared by every capture, as "
                   "every web capture did before; `keep': 1000 (the default), each round ~b ms "
                   "after another capture, whose pattern it finds set. Load average before / "
                   "after: ~s / ~s.~n~n",
                   [Rounds, Gap, Gap, Load0, Load1]),
     Speed,
     "\nWhat the kept pattern costs every other process while it is set: an untraced "
     "process compiling a module of 300 functions (median of 5 pairs), and the stall "
     "of the clear when the window ends (off the request's path):\n\n",
     "| functions loaded | compile, pattern kept (ms) | compile, none (ms) | ratio "
     "| stall of the clear (ms) |\n",
     "|--:|--:|--:|--:|--:|\n", Ratios].

label(toggle) -> "toggle (set and clear per capture)";
label(keep) -> "keep (1 s after the last capture)".

med(Key, Rs) -> median([maps:get(Key, R) || R <- Rs]).

ms(Us) -> Us / 1000.

ratio(_A, 0) -> 0.0;
ratio(A, B) -> A / B.
