%%% @doc The sink's OS process, seen from the VM: why a program that did
%%% not answer as kprof_sink does would not run (run once more, for its
%%% own words), the SIGKILL of a sink that stopped answering, and the log
%%% line of a sink that could not be started. {@link kprof_sink} owns the
%%% port; this module holds what it asks of the OS.
-module(kprof_sink_os).

-export([why_not_running/3, exited/1, kill/2, log_open_error/1, os_pid/1]).

%% A sink that exited before it answered is run once more for its words:
%% for at most this long, and this much of what it printed is kept.
-define(PROBE_MS, 2000).
-define(PROBE_BYTES, 2048).

%% @doc A program that exited with a failure before it answered: run it once
%% more, its stdin at end of file and its stderr read, for its own words
%% (the loader's "error while loading shared libraries: libuv.so.1: cannot
%% open shared object file", a usage line for bad sink_args). A sink that
%% can run exits 0 at once on an empty stdin, saying nothing.
-spec why_not_running({ok, port()} | {error, term()}, file:filename_all(), [string()]) ->
          {ok, port()} | {error, term()}.
%% A port closed by the failed write of the version command ({exit, epipe},
%% before its exit status came: seen on OTP 29 under load) is such a program too.
why_not_running({error, {sink_not_answering, Path, Why}} = Error, Path, Args)
  when Why =:= closed; Why =:= {exit, epipe};
       element(1, Why) =:= exit_status, element(2, Why) =/= 0 ->
    case run_once(Path, Args) of
        {Probe, Output} when is_integer(Probe), Probe =/= 0, Output =/= <<>> ->
            Status = case Why of
                         {exit_status, S} -> S;
                         _ -> Probe
                     end,
            {error, {sink_cannot_run, Path, #{exit_status => Status, output => Output}}};
        _ ->
            Error
    end;
why_not_running(Result, _Path, _Args) ->
    Result.

%% @doc A port that was gone before the version command could be sent (the
%% program exited at once): its exit status, which the port sent before it
%% closed, or `closed'.
-spec exited(port()) -> {exit_status, integer()} | closed.
exited(Port) ->
    receive
        {Port, {exit_status, Status}} -> {exit_status, Status}
    after 0 -> closed
    end.

%% Path run with Args through /bin/sh, stdin from /dev/null, stderr into its
%% output: {ExitStatus, the first ?PROBE_BYTES bytes of what it printed,
%% trimmed}, or {timeout, Bytes} after ?PROBE_MS.
-spec run_once(file:filename_all(), [string()]) -> {integer() | timeout, binary()}.
run_once(Path, Args) ->
    try open_port({spawn_executable, "/bin/sh"},
                  [{args, ["-c", "exec \"$0\" \"$@\" </dev/null 2>&1", Path | Args]},
                   binary, stream, exit_status, use_stdio, stderr_to_stdout]) of
        Port -> probe_output(Port, <<>>, erlang:monotonic_time(millisecond) + ?PROBE_MS)
    catch
        error:Reason -> {error, iolist_to_binary(io_lib:format("~p", [Reason]))}
    end.

probe_output(Port, Acc, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, Bytes}} ->
            probe_output(Port, <<Acc/binary, Bytes/binary>>, Deadline);
        {Port, {exit_status, Status}} ->
            {Status, trim_output(Acc)}
    after Left ->
        try port_close(Port) catch error:badarg -> ok end,
        {timeout, trim_output(Acc)}
    end.

trim_output(Bytes) ->
    Head = binary:part(Bytes, 0, min(byte_size(Bytes), ?PROBE_BYTES)),
    string:trim(Head).

%% @doc SIGKILL to the sink's OS process, waiting at most `WaitMs' for
%% kill(1) to exit; `{error, no_os_pid}' when its pid was never read.
-spec kill(integer() | undefined, timeout()) -> ok | {error, term()}.
kill(undefined, _WaitMs) ->
    {error, no_os_pid};
kill(OsPid, WaitMs) ->
    %% By its absolute path, never looked up on the PATH.
    case [K || K <- ["/bin/kill", "/usr/bin/kill"], filelib:is_regular(K)] of
        [] ->
            %% /bin/sh's builtin kill: no PATH lookup either.
            _ = os:cmd("kill -KILL " ++ integer_to_list(OsPid)),
            ok;
        [Kill | _] ->
            try open_port({spawn_executable, Kill},
                          [{args, ["-KILL", integer_to_list(OsPid)]}, exit_status]) of
                P -> receive {P, {exit_status, _}} -> ok after WaitMs -> ok end
            catch
                error:Reason -> {error, Reason}
            end
    end.

%% @doc The error log line of a sink that could not be started, by its reason.
-spec log_open_error(term()) -> ok.
log_open_error({sink_not_built, Path}) ->
    logger:error("kprof_sink: no sink binary at ~ts: run `make sink` to build it",
                 [Path]);
log_open_error({sink_not_answering, Path, Why}) ->
    logger:error("kprof_sink: ~ts does not answer as kprof_sink does (~p): check the "
                 "sink_path option", [Path, Why]);
log_open_error({sink_cannot_run, Path, #{exit_status := Status, output := Output}}) ->
    logger:error("kprof_sink: ~ts cannot run (exit status ~b): ~ts", [Path, Status, Output]);
log_open_error(Reason) ->
    logger:error("kprof_sink: cannot start the sink: ~p", [Reason]).

%% @doc The OS pid of a port's program, `undefined' for a port gone. kprof_sink
%% reads it once, at open: later, port_info/2 waits behind the port's backlog.
-spec os_pid(port()) -> integer() | undefined.
os_pid(Port) ->
    case erlang:port_info(Port, os_pid) of
        {os_pid, P} -> P;
        undefined -> undefined
    end.
