%%% @doc Sampling sessions of a real VM for the C tests (test/c/test_sample_sink.c):
%%% `make sample-recordings' (a node started with `+JPperf map'; the files
%%% are committed, see test/data/README.md).
%%%
%%% The session: a module reloaded six times, each version loaded after the
%%% one two before was purged (the JIT gives it that one's addresses) and
%%% run for 150 ms in one process (kprof_sample_tests' load/1 and
%%% spin_version/2), sampled at 499 Hz with `raw_record'. Its files:
%%%
%%% <ul>
%%% <li>`sample_reload_otpNN.ksr': the recording, its map reads cut to the
%%%     lines some sample's frames fall in (the whole map is a megabyte);</li>
%%% <li>`sample_reload_otpNN.txt': the session's stacks as its folded file
%%%     has them, in samples, roots by pid only, C code `[unknown]' (a replay
%%%     has no ELF files to name it from): what the replay must give.</li>
%%% </ul>
-module(kprof_sample_recorder).
-export([main/1]).

-define(HZ, 499).

main([Dir]) ->
    ok = kprof:start(),
    Otp = erlang:system_info(otp_release),
    Base = filename:join(Dir, "sample_reload_otp" ++ Otp),
    Tmp = filename:join("/tmp", "kprof-sample-rec-" ++ os:getpid()),
    ok = filelib:ensure_path(Tmp),
    Raw = filename:join(Tmp, "raw.ksr"),
    Self = self(),
    Runner = spawn(fun() ->
                           receive go -> ok end,
                           [begin
                                kprof_sample_tests:load(V),
                                kprof_sample_tests:spin_version(V, 150)
                            end || V <- lists:seq(1, 6)],
                           Self ! done
                   end),
    _ = spawn(fun() ->
                      Self ! {sampled, kprof:sample(2500, #{frequency => ?HZ, pid => Runner,
                                                            raw_record => Raw,
                                                            output_directory => Tmp,
                                                            output_format => folded})}
              end),
    timer:sleep(300),
    Runner ! go,
    receive done -> ok end,
    {ok, [Folded]} = receive {sampled, R} -> R end,
    ok = file:write_file(Base ++ ".ksr", minimized(Raw)),
    ok = file:write_file(Base ++ ".txt", expected(Folded)),
    io:format("wrote ~s.ksr and ~s.txt~n", [Base, Base]),
    _ = file:del_dir_r(Tmp),
    _ = file:delete("/tmp/perf-" ++ os:getpid() ++ ".map"),   % ours, left by +JPperf map
    halt().

%%% The recording, its map reads cut to the lines that name some frame

minimized(Raw) ->
    {ok, <<"KSR1", _:4/binary-unit:32, TN:32/little, _/binary>> = Bin} = file:read_file(Raw),
    HeaderLen = 24 + TN,
    <<Header:HeaderLen/binary, Chunks/binary>> = Bin,
    Cs = chunks(Chunks),
    Ips = lists:usort(lists:append([ips(P) || {$r, <<_:32, P/binary>>} <- Cs])),
    iolist_to_binary([Header | kept(Cs, Ips, <<>>)]).

%% A read may end inside a line: its rest is the next read's (as the sink
%% reads it), so a line is kept in the read that ends it.
kept([{$m, <<Time:8/binary, Text/binary>>} | Rest], Ips, Carry) ->
    All = <<Carry/binary, Text/binary>>,
    {Whole, Tail} = case binary:matches(All, <<"\n">>) of
                        [] -> {<<>>, All};
                        Ms -> {Pos, 1} = lists:last(Ms),
                              {binary:part(All, 0, Pos + 1),
                               binary:part(All, Pos + 1, byte_size(All) - Pos - 1)}
                    end,
    [chunk($m, keep(<<Time/binary, Whole/binary>>, Ips)) | kept(Rest, Ips, Tail)];
kept([{T, P} | Rest], Ips, Carry) ->
    [chunk(T, P) | kept(Rest, Ips, Carry)];
kept([], _, _) ->
    [].

chunks(<<T, Len:32/little, P:Len/binary, Rest/binary>>) -> [{T, P} | chunks(Rest)];
chunks(<<>>) -> [].

chunk(T, P) -> [T, <<(byte_size(P)):32/little>>, P].

%% The frames of the perf records of an 'r' chunk.
ips(<<9:32/little, _:16, Size:16/little, Rest/binary>>) ->
    Body = Size - 8,
    <<B:Body/binary, More/binary>> = Rest,
    <<_Ip:64/little, _:64, _Time:64/little, Nr:64/little, Chain:Nr/binary-unit:64, _/binary>> = B,
    [Ip || <<Ip:64/little>> <= Chain, Ip < 16#fffffffffffff000] ++ ips(More);
ips(<<_:32, _:16, Size:16/little, Rest/binary>>) when Size >= 8 ->
    Skip = Size - 8,
    <<_:Skip/binary, More/binary>> = Rest,
    ips(More);
ips(<<>>) -> [].

%% A map read keeps its time and the lines some frame falls in.
keep(<<Time:8/binary, Text/binary>>, Ips) ->
    Lines = [L || L <- binary:split(Text, <<"\n">>, [global]), L =/= <<>>, names_any(L, Ips)],
    <<Time/binary, (iolist_to_binary([[L, $\n] || L <- Lines]))/binary>>.

names_any(Line, Ips) ->
    case binary:split(Line, <<" ">>, [global]) of
        [A, S | _] ->
            Start = binary_to_integer(strip0x(A), 16),
            End = Start + binary_to_integer(S, 16),
            lists:any(fun(Ip) -> Ip >= Start andalso Ip < End end, Ips);
        _ -> false
    end.

strip0x(<<"0x", H/binary>>) -> H;
strip0x(H) -> H.

%%% What a replay must give

%% Each folded line in samples, its root the pid alone, C frames [unknown].
expected(Folded) ->
    {ok, Text} = file:read_file(Folded),
    Period = 1000000 / ?HZ,
    Rows = [row(L, Period) || L <- binary:split(Text, <<"\n">>, [global]),
                              L =/= <<>>, binary:first(L) =/= $#],
    Merged = lists:foldl(fun({K, N}, M) -> maps:update_with(K, fun(X) -> X + N end, N, M) end,
                         #{}, Rows),
    [[K, $\s, integer_to_list(N), $\n] || {K, N} <- lists:sort(maps:to_list(Merged)), N > 0].

row(Line, Period) ->
    {match, [Stack, Us]} = re:run(Line, "^(.*) ([0-9]+)$", [{capture, [1, 2], binary}]),
    [Root | Frames] = binary:split(Stack, <<";">>, [global]),
    Pid = case re:run(Root, "(<[0-9.]+>)", [{capture, [1], binary}]) of
              {match, [P]} -> P;
              nomatch -> Root
          end,
    Named = [case F of <<"[C]", _/binary>> -> <<"[unknown]">>; _ -> F end || F <- Frames],
    {iolist_to_binary(lists:join(";", [Pid | Named])),
     round(binary_to_integer(Us) / Period)}.
