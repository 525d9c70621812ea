#!/usr/bin/env escript
%% -*- erlang -*-
%% mksample.escript Dir Recording...: seeds for fuzz_sample (fuzz/fuzz_sample.c)
%% from recorded sampling sessions (test/data/sample_*.ksr): each whole
%% recording behind a 3 byte; the perf records of its ring chunks behind a 0
%% (as they come) and behind a 1 and an offset byte (copied into a ring at 8 times
%% it); the
%% text of its map reads behind a 2. Files named by the SHA-1 of their bytes.
-mode(compile).

main([Dir | Files]) ->
    ok = filelib:ensure_path(Dir),
    [seeds(Dir, F) || F <- Files],
    ok;
main(_) ->
    io:format(standard_error, "usage: mksample.escript Dir Recording...~n", []),
    halt(2).

seeds(Dir, File) ->
    {ok, Bin = <<"KSR1", _:16/binary, TN:32/little, _/binary>>} = file:read_file(File),
    HeaderLen = 24 + TN,
    <<_:HeaderLen/binary, Chunks/binary>> = Bin,
    Cs = chunks(Chunks),
    Rings = [P || {$r, <<_:32, P/binary>>} <- Cs],
    Maps = iolist_to_binary([T || {$m, <<_:8/binary, T/binary>>} <- Cs]),
    put_seed(Dir, [3, Bin]),
    put_seed(Dir, [0 | Rings]),
    [put_seed(Dir, [1, Off, lists:sublist(Rings, 16)]) || Off <- [0, 25, 255]],
    put_seed(Dir, [2, binary:part(Maps, 0, min(byte_size(Maps), 60000))]).

chunks(<<T, Len:32/little, P:Len/binary, Rest/binary>>) -> [{T, P} | chunks(Rest)];
chunks(<<>>) -> [].

put_seed(Dir, Io) ->
    B = iolist_to_binary(Io),
    Name = lists:flatten([io_lib:format("~2.16.0b", [X]) || <<X>> <= crypto:hash(sha, B)]),
    ok = file:write_file(filename:join(Dir, Name), binary:part(B, 0, min(byte_size(B), 65536))).
