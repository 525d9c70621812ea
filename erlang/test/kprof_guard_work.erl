%%% Code the guard tests trace: a loop of calls that can outrun a slowed sink,
%%% and a steady stream of tier requests (f/0 is the tier function).
-module(kprof_guard_work).
-export([f/0, loop/2, calls/1, paced/3]).

f() -> ok.

%% Calls f/0 N times per millisecond until told to stop (or Max ms pass).
loop(PerMs, MaxMs) ->
    Deadline = erlang:monotonic_time(millisecond) + MaxMs,
    loop(PerMs, Deadline, 0).

loop(PerMs, Deadline, N) ->
    receive
        {stop, From} -> From ! {stopped, N}
    after 0 ->
        case erlang:monotonic_time(millisecond) > Deadline of
            true -> receive {stop, From} -> From ! {stopped, N} end;
            false ->
                _ = [f() || _ <- lists:seq(1, PerMs)],
                timer:sleep(1),
                loop(PerMs, Deadline, N + PerMs)
        end
    end.

%% N calls of f/0.
calls(N) ->
    _ = [?MODULE:f() || _ <- lists:seq(1, N)],
    ok.

%% Runs Fun() PerSec times a second on average, whatever a loaded machine
%% makes of timer:sleep(1) (the calls due are made at each wake-up), until
%% told to stop (or MaxMs pass); replies {stopped, Runs}.
paced(PerSec, Fun, MaxMs) ->
    T0 = erlang:monotonic_time(microsecond),
    paced(PerSec, Fun, T0, T0 + MaxMs * 1000, 0).

paced(PerSec, Fun, T0, End, Done) ->
    receive
        {stop, From} -> From ! {stopped, Done}
    after 0 ->
        Now = erlang:monotonic_time(microsecond),
        case Now > End of
            true -> receive {stop, From} -> From ! {stopped, Done} end;
            false ->
                Due = max(0, (Now - T0) * PerSec div 1000000 - Done),
                _ = [Fun() || _ <- lists:seq(1, Due)],
                timer:sleep(1),
                paced(PerSec, Fun, T0, End, Done + Due)
        end
    end.
