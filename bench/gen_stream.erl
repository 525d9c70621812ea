#!/usr/bin/env escript
%%! -noshell +S 2
%%% gen_stream.erl: records a real traced workload into a {packet,4} stream file.
%%%
%%%   escript bench/gen_stream.erl [--messages N] FILE
%%%
%%% A few worker processes call this module's w_*/N functions (nested,
%%% recursive, tail calls, a caught exception), are scheduled in and out
%%% (`running'), and spawn, link and lose short-lived helpers (`procs',
%%% `set_on_spawn'), traced with
%%% [call, arity, return_to, monotonic_timestamp, running, procs, set_on_spawn]
%%% and the match spec [{'_', [], [{return_trace}, {exception_trace}]}] on the
%%% w_* functions, into `{tracer, Port}' where Port is
%%% open_port({spawn, "cat > FILE"}, [binary, {packet,4}, exit_status]), exactly
%%% the frames the VM's erl_tracer writes to kprof_sink (exit_status, or the
%%% port closes at once: it reads EOF on cat's redirected stdout). cat's stdin
%%% pipe is enlarged to pipe-max-size, and tracing runs in chunks of ~100k
%%% messages with the port's queue left to drain in between (it grows without
%%% bound and drains in O(n^2) when the writer lags), so recording 5 M
%%% messages takes ~20 s instead of hours.
%%%
%%% Stops after the chunk that reaches N messages (default 5,000,000), then
%%% counts the frames of FILE and writes the count to FILE without its extension
%%% plus ".count" (stream.bin -> stream.count: an exact integer and a newline),
%%% and prints the kinds of the first 500,000 messages.
-module(gen_stream).
-mode(compile).

-export([main/1]).
-export([w_top/2, w_mid/2, w_leaf/1, w_tail/2, w_rec/1, w_fail/1, w_catch/1, worker/1, helper/1]).

-define(WORKERS, 4).
-define(DEFAULT_MESSAGES, 5000000).
%% Work units per worker per chunk; a unit is ~63 messages, so a chunk is ~100k.
-define(UNITS, 400).
-define(PER_UNIT, 60).

main(Args) ->
    case parse(Args, ?DEFAULT_MESSAGES) of
        {ok, N, File} ->
            T0 = erlang:monotonic_time(millisecond),
            ok = record(N, File),
            Count = count_frames(File),
            ok = file:write_file(count_file(File), integer_to_list(Count) ++ "\n"),
            Ms = erlang:monotonic_time(millisecond) - T0,
            io:format("gen_stream: ~b messages, ~.1f MB in ~s (~.1f s)~n",
                      [Count, filelib:file_size(File) / 1.0e6, File, Ms / 1000]),
            print_kinds(File),
            halt(case Count >= N of true -> 0; false -> 1 end);
        usage ->
            io:format(standard_error, "usage: gen_stream.erl [--messages N] FILE~n", []),
            halt(2)
    end.

%% stream.bin -> stream.count
count_file(File) ->
    filename:rootname(File) ++ ".count".

parse(["--messages", N | Rest], _) -> parse(Rest, list_to_integer(N));
parse([File], N) -> {ok, N, File};
parse(_, _) -> usage.

%%% Recording

record(Target, File) ->
    ok = filelib:ensure_dir(File),
    Tmp = File ++ ".tmp",
    Port = open_port({spawn, "cat > '" ++ Tmp ++ "'"}, [binary, {packet, 4}, exit_status]),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    ok = enlarge_pipe(OsPid),
    Pattern = [{'_', [], [{return_trace}, {exception_trace}]}],
    [1 = erlang:trace_pattern({?MODULE, F, A}, Pattern, [local])
     || {F, A} <- [{w_top, 2}, {w_mid, 2}, {w_leaf, 1}, {w_tail, 2}, {w_rec, 1},
                   {w_fail, 1}, {w_catch, 1}]],
    Flags = [{tracer, Port}, call, arity, return_to, monotonic_timestamp, running, procs,
             set_on_spawn],
    Self = self(),
    Workers = [spawn(fun() -> worker(Self) end) || _ <- lists:seq(1, ?WORKERS)],
    [1 = erlang:trace(W, true, Flags) || W <- Workers],
    chunks(Port, Workers, Target, 0),
    [erlang:trace(W, false, [all]) || W <- Workers, is_process_alive(W)],
    _ = erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
    [W ! stop || W <- Workers],
    drain(Port),
    port_close(Port),
    wait_os_exit(OsPid),
    ok = file:rename(Tmp, File).

%% Each chunk: every worker does ?UNITS units, then the queue drains.
chunks(Port, Workers, Target, Done) when Done < Target ->
    %% Small targets (a fuzz seed) get one short chunk.
    Units = max(1, min(?UNITS, (Target - Done) div (?WORKERS * ?PER_UNIT) + 1)),
    [W ! {go, Units} || W <- Workers],
    [receive {done, W} -> ok end || W <- Workers],
    drain(Port),
    %% An estimate; the exact count comes from the file.
    chunks(Port, Workers, Target, Done + ?WORKERS * Units * ?PER_UNIT);
chunks(_, _, _, _) ->
    ok.

%% cat's stdin to /proc/sys/fs/pipe-max-size (F_SETPIPE_SZ is 1031), through
%% /proc/PID/fd/0, with perl (perl-base is in every Debian). With the default
%% 64 KiB, two chunks of 300k messages took 341 s to drain; with 1 MiB, 1.7 s.
enlarge_pipe(OsPid) ->
    Max = case file:read_file("/proc/sys/fs/pipe-max-size") of
              {ok, B} -> string:trim(binary_to_list(B));
              _ -> "1048576"
          end,
    Fd0 = "/proc/" ++ integer_to_list(OsPid) ++ "/fd/0",
    Code = "sysopen(my $f, $ARGV[0], 2048) or die qq(open: $!\\n); "
           "print fcntl($f, 1031, 0 + $ARGV[1]) || die qq(fcntl: $!\\n)",
    Out = case os:find_executable("perl") of
              false ->
                  "no perl";
              Perl ->
                  P = open_port({spawn_executable, Perl},
                                [{args, ["-e", Code, Fd0, Max]}, exit_status, stderr_to_stdout]),
                  collect(P, [])
          end,
    case string:to_integer(Out) of
        {N, _} when is_integer(N), N > 65536 -> ok;
        _ -> io:format(standard_error, "gen_stream: cat's pipe stays small: ~ts~n", [Out])
    end,
    ok.

collect(P, Acc) ->
    receive
        {P, {data, D}} -> collect(P, [Acc, D]);
        {P, {exit_status, _}} -> lists:flatten(Acc)
    end.

drain(Port) ->
    case erlang:port_info(Port, queue_size) of
        {queue_size, 0} ->
            %% Port tasks scheduled but not yet run do not show in queue_size.
            timer:sleep(20),
            case erlang:port_info(Port, queue_size) of
                {queue_size, 0} -> ok;
                _ -> drain(Port)
            end;
        {queue_size, _} ->
            timer:sleep(5),
            drain(Port)
    end.

wait_os_exit(OsPid) ->
    case os:cmd("kill -0 " ++ integer_to_list(OsPid) ++ " 2>/dev/null && echo alive") of
        "alive" ++ _ -> timer:sleep(10), wait_os_exit(OsPid);
        _ -> ok
    end.

%%% The workload (traced)

worker(Parent) ->
    receive
        {go, Units} ->
            ok = units(Units, 0),
            Parent ! {done, self()},
            worker(Parent);
        stop ->
            ok
    end.

units(0, _) ->
    ok;
units(N, Acc) ->
    Acc1 = w_top(N, Acc),
    %% Every other unit: scheduled out and back in (`running').
    case N rem 2 of
        0 -> erlang:yield();
        1 -> ok
    end,
    %% Every 50 units (and the last): a helper (spawn, link, exit,
    %% getting_unlinked...) and a wait for it (out / in).
    case N rem 50 of
        1 ->
            Self = self(),
            H = spawn_link(?MODULE, helper, [Self]),
            receive {helper, H, _} -> ok end,
            unlink(H);
        _ ->
            ok
    end,
    units(N - 1, Acc1).

helper(Parent) ->
    Parent ! {helper, self(), w_leaf(3)}.

w_top(N, Acc) ->
    A = w_mid(N, 3),
    B = w_tail(N, 4),
    C = w_rec(5),
    D = w_catch(N),
    Acc + A + B + C + D.

w_mid(N, 0) ->
    w_leaf(N);
w_mid(N, K) ->
    w_leaf(K) + w_mid(N, K - 1).

w_leaf(X) ->
    X * 2 + 1.

%% Tail calls: one return_to for the chain.
w_tail(X, 0) ->
    w_leaf(X);
w_tail(X, K) ->
    w_tail(X + 1, K - 1).

w_rec(0) ->
    0;
w_rec(K) ->
    1 + w_rec(K - 1).

w_fail(N) ->
    erlang:error({w_fail, N}).

w_catch(N) when N rem 10 =:= 0 ->
    try w_fail(N) catch error:{w_fail, _} -> 1 end;
w_catch(N) ->
    w_leaf(N).

%%% Checking the file

count_frames(File) ->
    {ok, Bin} = file:read_file(File),
    count(Bin, 0).

count(<<L:32, _:L/binary, Rest/binary>>, N) -> count(Rest, N + 1);
count(<<>>, N) -> N;
count(_, _) -> error(truncated_stream).

print_kinds(File) ->
    {ok, Fd} = file:open(File, [read, raw, binary, {read_ahead, 1 bsl 20}]),
    Kinds = sample(Fd, 500000, #{}),
    ok = file:close(Fd),
    Total = lists:sum(maps:values(Kinds)),
    io:format("gen_stream: kinds in the first ~b messages:~n", [Total]),
    [io:format("  ~-16s ~8b ~5.1f %~n", [K, V, 100 * V / Total])
     || {K, V} <- lists:reverse(lists:keysort(2, maps:to_list(Kinds)))],
    ok.

sample(_, 0, Acc) ->
    Acc;
sample(Fd, Left, Acc) ->
    case file:read(Fd, 4) of
        {ok, <<L:32>>} ->
            {ok, B} = file:read(Fd, L),
            K = element(3, binary_to_term(B)),
            sample(Fd, Left - 1, maps:update_with(K, fun(V) -> V + 1 end, 1, Acc));
        eof ->
            Acc
    end.
