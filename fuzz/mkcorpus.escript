#!/usr/bin/env escript
%%! -noshell
%%% mkcorpus.escript: the seed corpora of the two fuzz targets, from recorded VM streams.
%%%
%%%   escript fuzz/mkcorpus.escript SINK_DIR DECODE_DIR STREAM.bin...
%%%
%%% SINK_DIR (fuzz_sink: a 3-byte header choosing how the input is cut and
%%% configured, then stream bytes) gets every stream, cut at frame boundaries
%%% into pieces below the fuzzer's 64 KiB max_len, under a few headers; streams
%%% of command frames ({kprof, Ref, ping | stats | sync | reset | calls | version
%%% | foo}, badly shaped commands) alone and between trace frames; empty,
%%% oversized and truncated frames.
%%% DECODE_DIR (fuzz_decode: one frame) gets every distinct frame of the
%%% streams and the command frames.
%%% Files are named by the SHA-1 of their content, as libFuzzer names its own,
%%% so running this again adds nothing twice.
-mode(compile).

-define(MAX_LEN, 65536).

main([SinkDir, DecodeDir | Streams]) ->
    ok = filelib:ensure_dir(filename:join(SinkDir, "x")),
    ok = filelib:ensure_dir(filename:join(DecodeDir, "x")),
    Frames = lists:append([frames(read(S)) || S <- Streams]),
    Cmds = commands(),
    Distinct = lists:usort(Frames ++ Cmds),
    [save(DecodeDir, F) || F <- Distinct],
    %% Whole streams, cut in pieces, each under a few cut / option headers.
    Headers = [<<0, 0, 0>>, <<1, 6, 0>>, <<2, 1, 2>>, <<3, 0, 0>>, <<4, 9, 9>>, <<5, 3, 7>>,
               <<6, 5, 1>>, <<(8 + 32), 0, 0>>, <<(16 + 64 + 2), 50, 3>>, <<(24 + 128 + 4), 1, 1>>,
               <<(192 + 1), 2, 0>>],
    Pieces = lists:append([pieces(read(S)) || S <- Streams]),
    Tagged = lists:zip(Pieces, cycle(Headers, length(Pieces))),
    [save(SinkDir, <<H/binary, P/binary>>) || {P, H} <- Tagged],
    %% Commands alone, after some trace frames, and around a reset.
    Trace = iolist_to_binary(lists:sublist([packet(F) || F <- Frames, byte_size(F) < 500], 40)),
    CmdStream = iolist_to_binary([packet(C) || C <- Cmds]),
    %% The tier profiler: started on the workloads' functions, fed, reported.
    TierStarts = [packet(cmd(T)) || T <- [tiers_start(), tiers_start_rec()]],
    TierEnd = iolist_to_binary([packet(cmd({tier_report, false})), packet(cmd(sync)),
                                packet(cmd({tier_report, true})), packet(cmd(tier_reset)),
                                packet(cmd(tiers_stop))]),
    [save(SinkDir, <<H/binary, TierStart/binary, P/binary, TierEnd/binary>>)
     || {P, H} <- Tagged, TierStart <- TierStarts],
    %% Requests whose process is killed (an exit, no stop marker) among ones that end.
    [save(SinkDir, <<H/binary, (killed_stream())/binary>>) || H <- [<<0, 0, 0>>, <<3, 0, 0>>]],
    %% A flame capture over the same pieces (never flame_write: the fuzzer skips it).
    Pids = lists:sublist(lists:usort([element(2, T) || F <- Frames,
                                                      T <- [binary_to_term(F)],
                                                      element(1, T) =:= trace orelse
                                                          element(1, T) =:= trace_ts,
                                                      is_pid(element(2, T))]), 64),
    put(pids, Pids),
    FlameStart = iolist_to_binary([packet(cmd(C)) || C <- flame_start()]),
    FlameEnd = iolist_to_binary([packet(cmd(C))
                                 || C <- [{flame_status, 1}, {flame_members, 1}, sync,
                                          {flame_drop, 1}]]),
    [save(SinkDir, <<H/binary, FlameStart/binary, P/binary, FlameEnd/binary>>)
     || {P, H} <- Tagged],
    %% Overload: the clock synced to now and a 1 ms bound, so the recorded
    %% (old) stamps raise alerts.
    Overload = iolist_to_binary([packet(cmd({clock, erlang:monotonic_time()})),
                                 packet(cmd({overload, 1}))]),
    [save(SinkDir, <<H/binary, Overload/binary, P/binary, (packet(cmd(stats)))/binary>>)
     || {P, H} <- lists:sublist(Tagged, 1, 8)],
    [save(SinkDir, <<H/binary, S/binary>>)
     || H <- [<<0, 0, 0>>, <<3, 0, 0>>, <<2, 7, 7>>],
        S <- [CmdStream, <<Trace/binary, CmdStream/binary>>,
              <<Trace/binary, (packet(cmd(reset)))/binary, Trace/binary,
                (packet(cmd(calls)))/binary, (packet(cmd(stats)))/binary>>]],
    %% Framing edge cases: empty frames, a frame past max_frame (16 bytes with
    %% header bits 3-4 = 1), a truncated last frame.
    Big = packet(binary:copy(<<0>>, 100)),
    [save(SinkDir, B)
     || B <- [<<0, 0, 0, 0, 0, 0, 0, CmdStream/binary>>,
              <<8, 0, 0, Big/binary, CmdStream/binary>>,
              <<0, 0, 0, CmdStream/binary, 0, 0, 1, 0, 131, 104>>]],
    io:format("mkcorpus: ~b streams, ~b frames and ~b commands (~b distinct) -> ~s; "
              "~b stream seeds -> ~s~n",
              [length(Streams), length(Frames), length(Cmds), length(Distinct), DecodeDir,
               4 * length(Pieces) + min(8, length(Pieces)) + 14, SinkDir]),
    halt(0);
main(_) ->
    io:format(standard_error, "usage: mkcorpus.escript SINK_DIR DECODE_DIR STREAM.bin...~n", []),
    halt(2).

read(File) ->
    {ok, B} = file:read_file(File),
    B.

frames(<<L:32, F:L/binary, Rest/binary>>) -> [F | frames(Rest)];
frames(_) -> [].

packet(F) -> <<(byte_size(F)):32, F/binary>>.

%% The stream in pieces of whole frames, each below max_len less the header.
pieces(Bin) -> pieces(frames(Bin), <<>>, []).

pieces([], <<>>, Acc) -> lists:reverse(Acc);
pieces([], Cur, Acc) -> lists:reverse([Cur | Acc]);
pieces([F | Fs], Cur, Acc) ->
    P = packet(F),
    if
        byte_size(P) > ?MAX_LEN - 3 -> pieces(Fs, Cur, Acc);   % one frame too big: skip it
        byte_size(Cur) + byte_size(P) > ?MAX_LEN - 3 -> pieces(Fs, P, [Cur | Acc]);
        true -> pieces(Fs, <<Cur/binary, P/binary>>, Acc)
    end.

cycle(L, N) -> lists:sublist(lists:append(lists:duplicate(N div length(L) + 1, L)), N).

cmd(C) -> term_to_binary({kprof, 1, C}).

commands() ->
    Refs = [1, make_ref(), self(), {req, 42}, <<"r">>],
    [term_to_binary({kprof, R, C})
     || R <- Refs, C <- [ping, stats, sync, reset, calls, version, foo, tiers_stop, tier_reset,
                         {tier_report, true}, {tier_report, false}, {tier_report, true, true},
                         tiers_start(), tiers_start_rec(), {clock, -576460751234567890}, {overload, 1},
                         {overload, 0}, {flame_status, 1}, {flame_members, 1},
                         {flame_drop, 1}] ++ flame_start()] ++
        [term_to_binary(T)
         || T <- [{kprof, 1, {foo, [1, 2, 3], #{a => 1.5}}}, {kprof, 7}, {kprof, 7, ping, extra},
                  {kprof}, {kprof, 'ünï', calls}, kprof, {trace, 1, 2}]] ++
        [term_to_binary({kprof, 9, stats}, [{minor_version, 2}]),
         term_to_binary({kprof, make_ref(), ping}, [compressed])].

%% {tiers_start, Specs, Opts} over the functions of the recorded workloads.
tiers_start() ->
    {tiers_start,
     [{gen_stream, w_top, 2, entry}, {gen_stream, w_mid, '_', 0}, {gen_stream, w_leaf, 1, 1},
      {gen_stream, w_tail, 2, 2}, {gen_stream, w_rec, '_', 3}, {kprof_rec_work, '_', '_', 0},
      {kprof_mark, start, 1, start}, {kprof_mark, stop, 0, stop}],
     [{max_identities, 10}, {max_inflight, 100}, {max_request_events, 1000}, {slow_max, 3},
      {grace_ms, 1}, {slow_us, 0}]}.

%% The same over test/data's kprof_rec_work (the tokens_* recordings carry labels).
tiers_start_rec() ->
    {tiers_start,
     [{kprof_rec_work, run_tokens, 0, entry}, {kprof_rec_work, run, '_', entry},
      {kprof_rec_work, middle, '_', 0}, {kprof_rec_work, inner, 1, 1},
      {kprof_rec_work, leaf, 0, 2}, {kprof_rec_work, echo, 1, 3}],
     [{grace_ms, 0}, {slow_us, 0}, {slow_max, 2}]}.

%% Tiers with one slot and no grace: a request whose process is killed in a
%% tier (its exit frees the slot), nested ones of a process killed in them, a
%% worker's exit, then requests that end (stop marker, then exit), the report
%% and the stats. Also fuzz/regress/sink-tiers-killed (header 00 00 00).
killed_stream() ->
    [P, Q, W] = [list_to_pid("<0." ++ integer_to_list(N) ++ ".0>") || N <- [1001, 1002, 1003]],
    Req = {kprof, request, 2},
    Tok = fun(L) -> {0, L, 1, P, 0} end,
    Call = fun(Pid, Mfa, L, T) -> {trace_ts, Pid, call, Mfa, {Tok(L), Req}, T} end,
    Start = fun(Pid, L, Id, T) ->
                    [{trace_ts, Pid, call, {kprof_mark, start, 1}, {Tok(L), Req, Id}, T},
                     {trace_ts, Pid, return_to, Req, T + 1}]
            end,
    Stop = fun(Pid, L, T) ->
                   [Call(Pid, {kprof_mark, stop, 0}, L, T), {trace_ts, Pid, return_to, Req, T + 1}]
           end,
    Exit = fun(Pid, Why, T) -> {trace_ts, Pid, exit, Why, T} end,
    Events = Start(P, 1, get, 1000) ++
        [Call(P, {shop_http, handle, 1}, 1, 1100), Call(W, {shop_db, query, 2}, 1, 1200),
         {trace_ts, W, return_to, {gen_server, try_handle_call, 4}, 1300},
         Exit(W, normal, 1400), Exit(P, killed, 1500)] ++
        Start(Q, 2, outer, 2000) ++ Start(Q, 3, inner, 2100) ++ [Exit(Q, shutdown, 2200)] ++
        Start(P, 4, put, 3000) ++ [Call(P, {shop_http, handle, 1}, 4, 3100)] ++
        Stop(P, 4, 3200) ++ [Exit(P, normal, 3300), Call(W, {shop_db, query, 2}, 1, 3400)],
    Specs = [{shop_http, handle, 1, 0}, {shop_db, query, 2, 1},
             {kprof_mark, start, 1, start}, {kprof_mark, stop, 0, stop}],
    iolist_to_binary([packet(cmd({tiers_start, Specs, [{max_inflight, 1}, {grace_ms, 0}]}))]
                     ++ [packet(term_to_binary(E)) || E <- Events]
                     ++ [packet(cmd(C)) || C <- [{tier_report, true}, stats]]).

%% A capture of every traced process of the recordings.
flame_start() ->
    Pids = case get(pids) of undefined -> [self()]; P -> P end,
    %% Capture 1: the flow rules (no caller read), a small budget and stack;
    %% capture 2: the search rules ({caller}).
    [{flame_start, 1, [{sleep, true}, {gc, true}, {children, true}, {max_bytes, 65536},
                       {max_stack, 100}, {max_procs, 100},
                       {perf_period_us, 1000}, {top, 10}, {names, elixir},
                       {group, initial_call}, {fold_recursion, true}]},
     {flame_pids, 1, [{Pid, case N rem 2 of 0 -> undefined; 1 -> worker end}
                      || {N, Pid} <- lists:zip(lists:seq(1, length(Pids)), Pids)]},
     %% The labels kprof_flame_srv sends: {Pid, Name, InitialCall}, for known pids too.
     {flame_pids, 1, [{Pid, undefined, case N rem 2 of 0 -> undefined; 1 -> <<"m:init/1">> end}
                      || {N, Pid} <- lists:zip(lists:seq(1, length(Pids)), Pids)]},
     {flame_start, 2, [{group, all}, {callers, true}]}].

save(Dir, Bin) ->
    Name = binary:encode_hex(crypto:hash(sha, Bin)),
    ok = file:write_file(filename:join(Dir, string:lowercase(binary_to_list(Name))), Bin).
