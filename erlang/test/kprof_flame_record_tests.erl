%%% EUnit: a flame capture recorded to a file (`record => Path') and replayed
%%% (kprof:replay/2, `kprof_sink --replay'), on real OTP code: compile:file of a
%%% small module, called from a module compiled into the test's own directory
%%% (so that a peer node without that directory lacks the traced module).
%%% - the folded file of a replay with the capture's options is byte for byte
%%%   the live capture's; a replay to callgrind has the folded file's total;
%%% - `output_format => []' records only, and needs `record';
%%% - `max_record_bytes' cuts, counts and says so; `record_rotate' keeps
%%%   bounded segments that replay, together and alone;
%%% - an existing file or an unsafe directory: a clear error, nothing traced;
%%% - a truncated or garbage file: an error naming it, the outputs of what was
%%%   read, the sink alive;
%%% - a peer node with only kprof's code replays it to the same folded file;
%%% - `kprof_sink --replay' (no VM) writes the same folded file.
-module(kprof_flame_record_tests).
-include_lib("eunit/include/eunit.hrl").

record_test_() ->
    {timeout, 600,
     {setup, fun setup/0, fun cleanup/1,
      fun(Env) ->
              [{"replay with the capture's options: the same folded file, byte for byte; "
                "callgrind: the same total", {timeout, 120, fun() -> same_folded(Env) end}},
               {"output_format => [] records only, and needs record",
                {timeout, 120, fun() -> record_only(Env) end}},
               {"max_record_bytes: the file stays within it, the cut is counted and said",
                {timeout, 120, fun() -> cut(Env) end}},
               {"record_rotate: bounded segments, oldest removed, each replays",
                {timeout, 120, fun() -> rotate(Env) end}},
               {"an existing file or an unsafe directory: an error, nothing traced",
                {timeout, 60, fun() -> refused(Env) end}},
               {"bad arguments to replay", fun() -> bad_args(Env) end},
               {"a truncated or garbage file: an error, the outputs of what was read",
                {timeout, 120, fun() -> truncated(Env) end}},
               {"a peer node without the traced module writes the same folded file",
                {timeout, 180, fun() -> other_node(Env) end}},
               {"kprof_sink --replay writes the same folded file with no VM",
                {timeout, 120, fun() -> command_line(Env) end}}]
      end}}.

%% The guard's stall and lag bounds are its own tests' subject: here a loaded
%% machine (the sink descheduled for half a second) must not abort a capture.
%% (A function, not a macro: OTP 29 warns when a map literal is updated.)
slack() -> #{max_stall_ms => 30000, max_lag_ms => 30000}.

%% The traced module, compiled into Dir/ebin: run/1 compiles a source file;
%% loop/1 makes 3 events an iteration (its call, step/1's call and return).
-define(WORK, "-module(~s).~n-export([run/1, loop/1]).~n"
        "run(Src) -> {ok, _, _} = compile:file(Src, [binary, report_errors]), ok.~n"
        "loop(0) -> ok;~nloop(N) -> _ = step(N), loop(N - 1).~n"
        "step(N) -> {N, N * 2}.~n").

%% Every capture here fits in one ring of 32 MiB (the tracer's rings are
%% sized from the schedulers, 32 MiB down to 1 MiB): the events of a sink that
%% falls behind on a loaded machine wait in the ring, none is dropped, and
%% no capture is aborted for a full ring (in a quiet run, the 60-function
%% module's two million events of 48 bytes once were).
setup() ->
    ok = kprof_test_util:start(#{}),
    ok = application:set_env(kprof, ring_bytes, 32 bsl 20),
    Dir = kprof_test_util:tmp_dir("kprof-record"),
    Mod = list_to_atom("kprof_rec_work_" ++ integer_to_list(erlang:unique_integer([positive]))),
    %% Not Dir/ebin: code:priv_dir(kprof) would take Dir (kprof-record-...) for
    %% kprof's library directory.
    Ebin = filename:join([Dir, "work", "ebin"]),
    ok = filelib:ensure_path(Ebin),
    WorkSrc = filename:join(Dir, atom_to_list(Mod) ++ ".erl"),
    ok = file:write_file(WorkSrc, io_lib:format(?WORK, [Mod])),
    {ok, Mod} = compile:file(WorkSrc, [{outdir, Ebin}]),
    true = code:add_patha(Ebin),
    %% What it compiles: a small module of 8 functions (326,000 events on
    %% OTP 25: 15.6 MB of ring records).
    Src = filename:join(Dir, "small.erl"),
    ok = file:write_file(Src, ["-module(small).\n-export([f1/1]).\n",
                               [io_lib:format("f~b(X) -> case X of {a, B} -> [B, ~b | f~b(X)]; "
                                              "_ -> lists:reverse([~b | X]) end.~n",
                                              [K, K, K + 1, K]) || K <- lists:seq(1, 8)],
                               "f9(_) -> [].\n"]),
    Work = fun() -> Mod:run(Src) end,
    Work(),   % the compiler loaded: no error_handler frames
    #{dir => Dir, mod => Mod, work => Work, ebin => Ebin}.

cleanup(#{dir := Dir, ebin := Ebin}) ->
    ok = kprof:stop(),
    ok = application:unset_env(kprof, ring_bytes),
    _ = code:del_path(Ebin),
    file:del_dir_r(Dir).

%% A fresh directory of its own for each test.
sub(#{dir := Dir}, Name) ->
    D = filename:join(Dir, Name),
    ok = filelib:ensure_path(D),
    D.

%% The capture with record, folded written live; {FoldedFile, RecordFile}.
live(Env = #{work := Work}, Name, Extra) ->
    D = sub(Env, Name),
    Rec = filename:join(D, "c.kprec"),
    Opts = maps:merge(slack(), Extra),
    {ok, ok, Files} = kprof:flame_apply(Work, Opts#{output_directory => D, name => "live",
                                                    output_format => [folded], record => Rec}),
    Folded = filename:join(D, "live.folded"),
    ?assertEqual([Folded, Rec], Files),
    {Folded, Rec}.

same_folded(Env) ->
    {Folded, Rec} = live(Env, "same", #{}),
    D = filename:dirname(Rec),
    ?assertMatch({ok, [_]}, kprof:replay(Rec, #{output_directory => D, name => "again",
                                                output_format => folded})),
    Again = filename:join(D, "again.folded"),
    {ok, Live} = file:read_file(Folded),
    ?assert(byte_size(Live) > 1000),
    ?assertEqual(Live, element(2, file:read_file(Again))),
    %% The meta file beside it too, but for its id: the replay's own.
    ?assertEqual(without_id(read(D, "live.meta.json")), without_id(read(D, "again.meta.json"))),
    %% callgrind from the file: its totals line is the folded file's sum.
    {ok, [CG]} = kprof:replay(Rec, #{output_directory => D, name => "cg",
                                     output_format => [callgrind]}),
    ?assertEqual(filename:join(D, "callgrind.out.cg"), CG),
    ?assertEqual(folded_total(Live), callgrind_total(CG)),
    %% top => N: the table as terms after the files.
    {ok, [_], Top} = kprof:replay(Rec, #{output_directory => D, name => "top",
                                         output_format => folded, top => 5}),
    ?assertEqual(5, length(Top)),
    %% the options it was recorded with, from its header.
    {ok, Recorded} = kprof:recorded_options(Rec),
    ?assertMatch(#{top := 0, group := initial_call, names := erlang, children := true,
                   hide := {kprof_flame_run, _, _}, trigger := undefined}, Recorded),
    ?assertEqual(lists:sort([K || {_, K} <- kprof_opts:record_keys()]),
                 lists:sort(maps:keys(Recorded))),
    ?assertMatch({error, {replay_failed, _, {open_failed, enoent}}},
                 kprof:recorded_options(filename:join(D, "none.kprec"))),
    %% a binary path: binaries back.
    {ok, [B]} = kprof:replay(list_to_binary(Rec), #{output_directory => list_to_binary(D),
                                                    name => "bin", output_format => folded}),
    ?assert(is_binary(B)).

record_only(Env = #{work := Work}) ->
    D = sub(Env, "only"),
    Rec = filename:join(D, "only.kprec"),
    ?assertEqual({error, {bad_option, output_format, []}},
                 kprof:flame_apply(Work, #{output_format => [], output_directory => D})),
    ?assertEqual({ok, ok, [Rec]},
                 kprof:flame_apply(Work, (slack())#{output_format => [], record => Rec,
                                           output_directory => D})),
    ?assertEqual([Rec], filelib:wildcard(filename:join(D, "*"))),
    {ok, [F]} = kprof:replay(Rec, #{output_directory => D, output_format => folded}),
    ?assertEqual(filename:join(D, "only.kprec.folded"), F),
    ?assert(folded_total(element(2, file:read_file(F))) > 0).

cut(Env = #{work := Work}) ->
    D = sub(Env, "cut"),
    Rec = filename:join(D, "cut.kprec"),
    Max = 8192,
    {{ok, ok, Files, Summary}, Out} =
        with_io(
          fun() -> kprof:flame_apply(Work, (slack())#{output_format => folded, record => Rec,
                                             output_directory => D, max_record_bytes => Max,
                                             info => true}) end),
    ?assert(lists:member(Rec, Files)),
    #{record := #{cut_events := CutN, events := Kept, files := [_]}, events := All} = Summary,
    ?assert(CutN > 0),
    ?assert(Kept > 0),
    %% Every event of the capture is in the file or counted as cut (the file may
    %% hold a few the capture itself ignores: membership's, say).
    ?assert(Kept + CutN >= All),
    ?assert(filelib:file_size(Rec) =< Max),
    ?assertNotEqual(nomatch, string:find(Out, "not in " ++ Rec)),
    %% What was kept replays, every event of it: the file is whole (its trailer written).
    {ok, [_], #{replay := #{events := Kept, truncated := false}}} =
        kprof:replay(Rec, #{output_directory => D, name => "kept", output_format => folded,
                            info => true}).

%% The work is 150,000 events (7.2 MB of ring records), fewer than the
%% compile's: the sink writes a new segment every 8 KiB. Uncorrected: a
%% replay corrects the times by the events' cost only when its whole time is
%% more than that cost, which a segment alone on a loaded machine may not be
%% (one segment's raw 997 us against three segments' 102 us corrected), and
%% the raw times of one segment are part of all three's.
rotate(Env = #{mod := Mod}) ->
    D = sub(Env, "rotate"),
    Rec = filename:join(D, "r.kprec"),
    Max = 8192,
    Work = fun() -> Mod:loop(50000) end,
    {ok, ok, Files, #{record := #{files := Segs, cut_events := CutN}, events := All}} =
        kprof:flame_apply(Work, (slack())#{output_format => folded, record => Rec,
                                        output_directory => D, max_record_bytes => Max,
                                        record_rotate => 2, info => true, correct => false}),
    ?debugFmt("record_rotate: ~b events, ~b cut", [All, CutN]),
    Expect = [Rec ++ ".2", Rec ++ ".1", Rec],
    ?assertEqual(Expect, [binary_to_list(S) || S <- Segs]),
    ?assertEqual(Expect, [F || F <- Files, not lists:suffix(".folded", F)]),
    ?assert(CutN > 0),   % more than three segments' worth: the oldest were removed
    _ = [?assert(filelib:file_size(S) =< Max) || S <- Expect],
    ?assertEqual(lists:sort(Expect), lists:sort(filelib:wildcard(Rec ++ "*"))),
    {ok, [_], #{replay := #{events := InFiles, truncated := false}}} =
        kprof:replay(Expect, #{output_directory => D, name => "all", output_format => folded,
                               info => true}),
    %% Every event of the capture is in the files or counted as cut.
    ?assert(InFiles + CutN >= All),
    %% A full segment (the newest may hold nothing but the end) replays alone:
    %% part of the events and of the time of all three.
    {ok, [_], #{replay := #{events := InOne, truncated := false}}} =
        kprof:replay(Rec ++ ".1", #{output_directory => D, name => "one",
                                    output_format => folded, info => true}),
    OneUs = folded_total(read(D, "one.folded")),
    AllUs = folded_total(read(D, "all.folded")),
    ?debugFmt("record_rotate: ~b of the files' ~b events and ~b of their ~b us in one segment",
              [InOne, InFiles, OneUs, AllUs]),
    ?assert(InOne > 0 andalso InOne < InFiles),
    ?assert(OneUs < AllUs).

refused(Env) ->
    D = sub(Env, "refused"),
    Rec = filename:join(D, "exists.kprec"),
    ok = file:write_file(Rec, <<"mine">>),
    Self = self(),
    Run = fun() -> Self ! ran, ok end,
    ?assertMatch({error, {record_failed, Rec, eexist}},
                 kprof:flame_apply(Run, #{record => Rec, output_directory => D})),
    ?assertEqual({ok, <<"mine">>}, file:read_file(Rec)),
    Missing = filename:join([D, "no", "such", "x.kprec"]),
    ?assertMatch({error, {record_failed, _, _}},
                 kprof:flame_apply(Run, #{record => Missing, output_directory => D})),
    Open = sub(Env, "open"),
    ok = file:change_mode(Open, 8#777),
    ?assertMatch({error, {record_failed, _, {writable, _}}},
                 kprof:flame_apply(Run, #{record => filename:join(Open, "x.kprec"),
                                          output_directory => D})),
    ?assertEqual([], filelib:wildcard(filename:join(Open, "*"))),
    receive ran -> ?assert(false) after 0 -> ok end,
    ?assertEqual(pong, kprof:sink_ping()).

bad_args(Env) ->
    D = sub(Env, "badargs"),
    ?assertEqual({error, {badarg, 42}}, kprof:replay(42, #{})),
    ?assertEqual({error, {badarg, []}}, kprof:replay([], #{})),
    ?assertEqual({error, {unknown_options, [children]}}, kprof:replay("x", #{children => true})),
    ?assertEqual({error, {bad_option, output_format, []}},
                 kprof:replay("x", #{output_format => []})),
    ?assertMatch({error, {replay_failed, _, _}},
                 kprof:replay(filename:join(D, "missing.kprec"), #{output_directory => D})).

truncated(Env) ->
    {_Folded, Rec} = live(Env, "trunc", #{}),
    D = filename:dirname(Rec),
    {ok, Bin} = file:read_file(Rec),
    Half = filename:join(D, "half.kprec"),
    ok = file:write_file(Half, binary:part(Bin, 0, byte_size(Bin) div 2)),
    {Res, Out} = with_io(
                   fun() ->
                           kprof:replay(Half, #{output_directory => D, output_format => folded})
                   end),
    ?assertMatch({error, {truncated, _, [_]}}, Res),
    {error, {truncated, _, [F]}} = Res,
    ?assert(folded_total(element(2, file:read_file(F))) > 0),
    ?assertNotEqual(nomatch, string:find(Out, "ends early")),
    Garbage = filename:join(D, "garbage.kprec"),
    ok = file:write_file(Garbage, crypto:strong_rand_bytes(5000)),
    ?assertMatch({error, {replay_failed, _, _}},
                 kprof:replay(Garbage, #{output_directory => D, output_format => folded})),
    %% The header whole, the stream garbage.
    Corrupt = filename:join(D, "corrupt.kprec"),
    ok = file:write_file(Corrupt, [binary:part(Bin, 0, min(byte_size(Bin), 200)),
                                   crypto:strong_rand_bytes(5000)]),
    ?assertMatch({error, _},
                 kprof:replay(Corrupt, #{output_directory => D, output_format => folded})),
    ?assertEqual(pong, kprof:sink_ping()).

%% A peer node with kprof's code only: the traced module is not there.
other_node(Env = #{mod := Mod}) ->
    {Folded, Rec} = live(Env, "peer", #{}),
    D = filename:dirname(Rec),
    Ebin = filename:dirname(code:which(kprof)),
    {ok, Peer, _Node} = peer:start(#{name => peer:random_name(kprof_replay),
                                     connection => standard_io, args => ["-pa", Ebin]}),
    try
        ?assertEqual(non_existing, peer:call(Peer, code, which, [Mod])),
        %% top => 3: its rows name functions of modules the peer never loaded.
        Res = peer:call(Peer, kprof, replay, [Rec, #{output_directory => D, name => "peer",
                                                     output_format => folded, top => 3}], 60000),
        ?assertMatch({ok, [_], [#{mfa := {_, _, _}}, _, _]}, Res),
        ?assertEqual([filename:join(D, "peer.folded")], element(2, Res)),
        ?assertEqual(read(D, "live.folded"), element(2, file:read_file(Folded))),
        ?assertEqual(read(D, "live.folded"), read(D, "peer.folded"))
    after
        peer:stop(Peer)
    end.

command_line(Env) ->
    {_Folded, Rec} = live(Env, "cli", #{}),
    D = filename:dirname(Rec),
    Sink = filename:absname(kprof_sink:default_path()),
    {0, Out} = run(Sink, ["--replay", Rec, "--out", D, "--name", "cli", "--format", "folded"]),
    ?assertEqual(filename:join(D, "cli.folded"), string:trim(Out)),
    ?assertEqual(read(D, "live.folded"), read(D, "cli.folded")),
    ?assertEqual(without_id(read(D, "live.meta.json")), without_id(read(D, "cli.meta.json"))),
    {2, _} = run(Sink, ["--replay"]),
    ok = file:write_file(filename:join(D, "bad.kprec"), <<"not a recording">>),
    {1, _} = run(Sink, ["--replay", filename:join(D, "bad.kprec"), "--out", D]).

%% The command's exit code and its stdout (stderr dropped); paths without spaces.
run(Exe, Args) ->
    Out = os:cmd(lists:flatten(lists:join(" ", [Exe | Args])) ++ " 2>/dev/null; echo \"rc=$?\""),
    [Text, Rc] = string:split(Out, "rc=", trailing),
    {list_to_integer(string:trim(Rc)), Text}.

read(D, Name) ->
    {ok, Bin} = file:read_file(filename:join(D, Name)),
    Bin.

%% A .meta.json with its "id" (the capture's, or a replay's own) taken out, the
%% rest (processes, total_us, formats, the correction's figures) as written.
without_id(Meta) ->
    {match, [Pre, Post]} = re:run(Meta, "^(.*)\"id\":[0-9]+,(.*)$",
                                  [{capture, all_but_first, binary}, dotall]),
    ?assertNotEqual(nomatch, binary:match(Post, <<"\"correction\":{\"applied\":">>)),
    <<Pre/binary, Post/binary>>.

%% The sum of a folded file's counts (only "frames count" lines: any other
%% fails the count's parse).
folded_total(Bin) ->
    lists:sum([binary_to_integer(lists:last(binary:split(L, <<" ">>, [global])))
               || L <- binary:split(Bin, <<"\n">>, [global, trim_all])]).

%% What Fun returns, and what it printed.
with_io(Fun) ->
    Out = kprof_test_util:capture_io(fun() -> put({?MODULE, res}, Fun()) end),
    {erase({?MODULE, res}), binary_to_list(Out)}.

%% The callgrind file's `totals:' line.
callgrind_total(File) ->
    {ok, Bin} = file:read_file(File),
    [T] = [binary_to_integer(string:trim(V)) || <<"totals:", V/binary>>
                                                    <- binary:split(Bin, <<"\n">>, [global])],
    T.
