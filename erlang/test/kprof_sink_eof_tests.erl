%%% EUnit: the sink owes a reply to every command it read, and writes them all
%%% before it exits at end of input — stdin a pipe (the port) or a file (replays),
%%% stdout a pipe (libuv writes) or a file. A slow reader of a small pipe
%%% (64 KiB, --pipe-size) leaves most replies queued in libuv at end of input:
%%% they are written all the same (closing stdout then cancelled them, and
%%% 3,073 replies of 5,000 came out when the reader lagged).
-module(kprof_sink_eof_tests).
-include_lib("eunit/include/eunit.hrl").

-define(N, 5000).

eof_test_() ->
    [{Name, {timeout, 60, fun() -> run(Cmd) end}} ||
        {Name, Cmd} <- [{"pipe in, pipe out", "cat ~s | ~s | cat > ~s"},
                        {"file in, pipe out", "~s < ~s | cat > ~s"},
                        {"pipe in, file out", "cat ~s | ~s > ~s"},
                        {"pipe in, slow pipe out", "cat ~s | ~s --pipe-size 65536 | (sleep 1; cat) > ~s"},
                        {"file in, slow pipe out", "~s --pipe-size 65536 < ~s | (sleep 1; cat) > ~s"}]].

run(Shape) ->
    Dir = filename:join(["_build", "test", "eof"]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    In = filename:join(Dir, "in.bin"),
    Out = filename:join(Dir, "out.bin"),
    Sink = kprof_sink:default_path(),
    %% Commands mixed with a few trace-like frames and garbage, ending mid-frame.
    Frames = [frame(term_to_binary({kprof, N, case N rem 3 of 0 -> ping; 1 -> sync; 2 -> stats end}))
              || N <- lists:seq(1, ?N)],
    Junk = [frame(<<1, 2, 3>>), frame(term_to_binary(hello))],
    ok = file:write_file(In, [Junk, Frames, <<0, 0, 0, 9, 131>>]),
    Args = case Shape of
               "cat " ++ _ -> [In, Sink, Out];
               _ -> [Sink, In, Out]
           end,
    _ = os:cmd(lists:flatten(io_lib:format(Shape, Args))),
    {ok, Bin} = file:read_file(Out),
    Replies = [binary_to_term(B) || B <- split(Bin)],
    ?assertEqual(?N, length(Replies)),
    ?assertEqual(lists:seq(1, ?N), [Ref || {kprof_reply, Ref, _} <- Replies]),
    {kprof_reply, _, Last} = lists:last(Replies),
    %% The last command (5000 rem 3 = 2) is stats: it saw the junk too.
    ?assertMatch(#{decode_errors := 1, unknown := 1}, Last).

frame(B) -> <<(byte_size(B)):32, B/binary>>.

split(<<L:32, F:L/binary, Rest/binary>>) -> [F | split(Rest)];
split(<<>>) -> [].
