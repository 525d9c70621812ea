%%% Code the guard tests trace: a loop of calls that can outrun a slowed sink.
-module(kprof_guard_work).
-export([f/0, loop/2]).

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
