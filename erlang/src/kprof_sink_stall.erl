%%% @doc What a sink that did not answer in time was doing, read when a call
%%% to it times out, so that the timeout says why. kprof_sink calls say/4,
%%% at most once every 10 s, and goes on; a process of its own reads the
%%% figures, reads the sink's CPU time again 500 ms later, and logs an error:
%%% <ul>
%%% <li>`queue_bytes': what the VM holds for the sink's port. Commands go
%%%     through the port behind trace messages: a port tracer's backlog
%%%     delays every answer until the sink has read it;</li>
%%% <li>`port_wait_ms': how long reading `queue_bytes' took. The VM answers
%%%     port_info/2 in order with the work it holds for the port, such as
%%%     the trace messages a port tracer's events became: seconds here are
%%%     a backlog the queue's bytes do not show;</li>
%%% <li>`writer_messages': the commands a busy port did not take yet, held
%%%     by kprof_sink's writer process;</li>
%%% <li>`server_messages': the messages waiting for kprof_sink itself (the
%%%     sink's replies among them, when the server is what is slow);</li>
%%% <li>`os': the sink's OS process, from Linux's /proc: its `state' (`"R"'
%%%     running or waiting for a CPU, `"S"' sleeping, `"D"' in the disk,
%%%     `"T"' stopped), `wchan' (the kernel function it sleeps in), `cpu_ms'
%%%     (its user and system time since it started) and `cpu_ms_after' (what
%%%     of it the next 500 ms added); `unknown' elsewhere, or when it is
%%%     gone.</li>
%%% <li>`other_ports': the earlier sinks' ports the VM still holds, each
%%%     with its `queue_bytes' and `os' as above. kprof_sink kills the
%%%     port of a sink it restarts or stops, which drops its queue, and the
%%%     sink of a predecessor killed outright; a port still listed waits
%%%     for the VM to reach the kill behind the trace messages sent to it
%%%     before;</li>
%%% <li>`call': the command that timed out (its name) and its timeout.</li>
%%% <li>`late_ms': how much later than asked the report's own 500 ms sleep
%%%     ended: a VM whose schedulers are busy or starved wakes it late.</li>
%%% <li>`port_output': the bytes the VM has handed the port's driver since
%%%     it opened (`bytes'), and what of it the next 500 ms added
%%%     (`bytes_after'). A command waits in the VM until the port runs its
%%%     task: nothing handed over, nothing queued, and a sink asleep means
%%%     the port's tasks are not being run;</li>
%%% <li>`writer': kprof_sink's writer process, `none', or its `status' and
%%%     `current_function'. A writer `suspended' in a port command holds a
%%%     command the port does not take: the VM has the port busy.</li>
%%% </ul>
%%% A sink running with the queue full is behind on its input; one that
%%% sleeps with the queue full is not reading it; a sink that runs flat out
%%% with nothing queued is busy with work of its own; one that sleeps with
%%% nothing queued answered, and the answer waits in `server_messages'.
-module(kprof_sink_stall).

-export([say/5, explain/4, message/2]).

-export_type([stall/0, call/0]).

%% The call that timed out: its command's name (an atom, or a tuple's tag)
%% and its timeout.
-type call() :: #{command := atom(), timeout_ms := non_neg_integer()}.

-type stall() :: #{queue_bytes := non_neg_integer() | unknown,
                   port_wait_ms := non_neg_integer(),
                   writer_messages := non_neg_integer(),
                   server_messages := non_neg_integer(),
                   os := stall_os(),
                   other_ports := [other_port()],
                   port_output := #{bytes := non_neg_integer() | unknown,
                                    bytes_after => integer()},
                   writer := none | #{status := atom(), current_function := mfa() | undefined},
                   call => call(),
                   late_ms => non_neg_integer()}.
-type other_port() :: #{port := port(), os_pid := integer() | undefined,
                        queue_bytes := non_neg_integer() | unknown, os := stall_os()}.
-type stall_os() :: #{state := string(), wchan := string(), cpu_ms := non_neg_integer(),
                      cpu_ms_after => non_neg_integer()}
                  | unknown.

%% Linux's USER_HZ, the unit of /proc/PID/stat's times: 100 on every
%% architecture it exports to user space.
-define(USER_HZ, 100).
%% How long after the timeout the sink's CPU time is read again.
-define(AFTER_MS, 500).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc In a process of its own: explain/4 now, the sink's CPU time again
%% 500 ms later, then the error logged with `Call' (the command that timed
%% out) (message/2; the figures also in the
%% event's metadata, under `kprof_sink_stall'). Returns at once.
%% Its group leader is `user': an application's stop kills the processes of
%% its group leader, and kprof stopped right after the timeout (a caller
%% that gives up, a test's clean-up) would take the report with it.
-spec say(port(), integer() | undefined, pid() | undefined, pid(), call()) -> pid().
say(Port, OsPid, Writer, Server, Call) ->
    spawn(fun() ->
                  _ = outlive_application(),
                  Stall = #{os := Os} = explain(Port, OsPid, Writer, Server),
                  T0 = erlang:monotonic_time(millisecond),
                  timer:sleep(?AFTER_MS),
                  Late = erlang:monotonic_time(millisecond) - T0 - ?AFTER_MS,
                  Others = [O#{os := after_ms(OOs, os_process(OOsPid))}
                            || O = #{os := OOs, os_pid := OOsPid} <- maps:get(other_ports, Stall)],
                  Said = Stall#{os := after_ms(Os, os_process(OsPid)), other_ports := Others,
                                port_output := output_after(maps:get(port_output, Stall),
                                                            port_output(Port)),
                                call => Call, late_ms => max(0, Late)},
                  logger:error("~ts", [message(OsPid, Said)], #{kprof_sink_stall => Said})
          end).

%% @doc What the sink's port, kprof_sink's writer and server, and the
%% sink's OS process (`OsPid', `undefined' when not known) are doing now.
-spec explain(port(), integer() | undefined, pid() | undefined, pid()) -> stall().
explain(Port, OsPid, Writer, Server) ->
    T0 = erlang:monotonic_time(millisecond),
    Q = queue_bytes(Port),
    #{queue_bytes => Q,
      port_wait_ms => erlang:monotonic_time(millisecond) - T0,
      writer_messages => messages(Writer),
      server_messages => messages(Server),
      os => os_process(OsPid),
      other_ports => other_ports(Port),
      port_output => port_output(Port),
      writer => writer(Writer)}.

%% @doc A line for the log: the sink's OS pid first, then the figures of
%% explain/4.
-spec message(integer() | undefined, stall()) -> iolist().
message(OsPid, Stall = #{queue_bytes := Q, port_wait_ms := WaitMs, writer_messages := W,
                          server_messages := M, os := Os, other_ports := Others,
                          port_output := Output, writer := Writer}) ->
    io_lib:format("kprof_sink: the sink (OS pid ~p) did not answer in time~ts: ~ts queued to "
                  "its port (read in ~b ms), ~b command(s) waiting to be written, ~b message(s) "
                  "waiting for kprof_sink; ~ts; earlier sink ports still open: ~ts; ~ts; ~ts~ts",
                  [OsPid, call_text(maps:get(call, Stall, none)), bytes(Q),
                   WaitMs, W, M, os_text(Os), others_text(Others), output_text(Output),
                   writer_text(Writer),
                   case Stall of
                       #{late_ms := L} -> io_lib:format("; this report woke ~b ms late", [L]);
                       _ -> ""
                   end]).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% The calling process out of the application's group (see say/4).
-spec outlive_application() -> true | undefined.
outlive_application() ->
    case whereis(user) of
        undefined -> undefined;
        User -> group_leader(User, self())
    end.

-spec queue_bytes(port()) -> non_neg_integer() | unknown.
queue_bytes(Port) ->
    port_value(Port, queue_size).

%% One item of port_info/2, `unknown' once the port is gone.
-spec port_value(port(), queue_size | output | name) -> term() | unknown.
port_value(Port, Item) ->
    case erlang:port_info(Port, Item) of
        {Item, V} -> V;
        undefined -> unknown
    end.

%% The VM's other ports of the same program as Port (the sink's name).
-spec other_ports(port()) -> [other_port()].
other_ports(Port) ->
    case port_value(Port, name) of
        unknown ->
            [];
        Name ->
            [#{port => P, os_pid => OsPid, queue_bytes => queue_bytes(P),
               os => os_process(OsPid)}
             || P <- erlang:ports(), P =/= Port, port_value(P, name) =:= Name,
                OsPid <- [kprof_sink_os:os_pid(P)]]
    end.

%% What the VM has handed the port's driver since the port opened.
-spec port_output(port()) -> #{bytes := non_neg_integer() | unknown}.
port_output(Port) ->
    #{bytes => port_value(Port, output)}.

output_after(Out = #{bytes := B0}, #{bytes := B1}) when is_integer(B0), is_integer(B1) ->
    Out#{bytes_after => B1 - B0};
output_after(Out, _) ->
    Out.

-spec writer(pid() | undefined) -> none | #{status := atom(),
                                            current_function := mfa() | undefined}.
writer(undefined) ->
    none;
writer(Pid) ->
    case erlang:process_info(Pid, [status, current_function]) of
        [{status, St}, {current_function, F}] -> #{status => St, current_function => F};
        undefined -> none
    end.

-spec messages(pid() | undefined) -> non_neg_integer().
messages(undefined) ->
    0;
messages(Pid) ->
    case erlang:process_info(Pid, message_queue_len) of
        {message_queue_len, N} -> N;
        undefined -> 0
    end.

%% The CPU time the sink used between two readings.
-spec after_ms(stall_os(), stall_os()) -> stall_os().
after_ms(Os = #{cpu_ms := Ms0}, #{cpu_ms := Ms1}) -> Os#{cpu_ms_after => Ms1 - Ms0};
after_ms(Os, _) -> Os.

%% /proc/PID/stat: "PID (COMM) STATE ..." where COMM may hold spaces and
%% parentheses; the fields after its last ")" are fixed: state is the 1st,
%% utime and stime the 12th and 13th.
-spec os_process(integer() | undefined) -> stall_os().
os_process(undefined) ->
    unknown;
os_process(OsPid) ->
    Dir = "/proc/" ++ integer_to_list(OsPid),
    case file:read_file(Dir ++ "/stat") of
        {ok, Stat} ->
            [_, After] = string:split(Stat, ")", trailing),
            [State | Rest] = string:lexemes(After, " \n"),
            {UTime, STime} = {lists:nth(11, Rest), lists:nth(12, Rest)},
            Ticks = binary_to_integer(UTime) + binary_to_integer(STime),
            #{state => binary_to_list(State),
              wchan => wchan(Dir),
              cpu_ms => Ticks * 1000 div ?USER_HZ};
        {error, _} ->
            unknown
    end.

-spec wchan(string()) -> string().
wchan(Dir) ->
    case file:read_file(Dir ++ "/wchan") of
        {ok, W} when W =/= <<>>, W =/= <<"0">> -> binary_to_list(W);
        _ -> "-"
    end.

-spec os_text(stall_os()) -> iolist().
os_text(unknown) ->
    "its OS process not readable here";
os_text(Os = #{state := State, wchan := W, cpu_ms := Ms}) ->
    io_lib:format("its OS process ~ts (~ts, in ~ts), ~b ms of CPU since it started~ts",
                  [state_name(State), State, W, Ms,
                   case Os of
                       #{cpu_ms_after := A} -> io_lib:format(", ~b ms in the ~b ms after",
                                                            [A, ?AFTER_MS]);
                       _ -> ""
                   end]).

-spec output_text(#{bytes := non_neg_integer() | unknown, bytes_after => integer()}) ->
          iolist().
output_text(#{bytes := B, bytes_after := A}) ->
    io_lib:format("its port handed ~ts since it opened, ~ts in the ~b ms after",
                  [bytes(B), bytes(A), ?AFTER_MS]);
output_text(#{bytes := B}) ->
    io_lib:format("its port handed ~ts since it opened", [bytes(B)]).

-spec writer_text(none | #{status := atom(), current_function := mfa() | undefined}) ->
          iolist().
writer_text(none) ->
    "no writer process";
writer_text(#{status := St, current_function := {M, F, A}}) ->
    io_lib:format("its writer process ~p in ~p:~p/~b", [St, M, F, A]);
writer_text(#{status := St}) ->
    io_lib:format("its writer process ~p", [St]).

-spec call_text(call() | none) -> iolist().
call_text(#{command := C, timeout_ms := Ms}) -> io_lib:format(" (~p, ~b ms)", [C, Ms]);
call_text(none) -> "".

-spec others_text([other_port()]) -> iolist().
others_text([]) ->
    "none";
others_text(Others) ->
    lists:join(", ", [io_lib:format("~p (OS pid ~p) with ~ts queued, ~ts",
                                    [P, OsPid, bytes(Q), os_text(Os)])
                      || #{port := P, os_pid := OsPid, queue_bytes := Q, os := Os} <- Others]).

state_name("R") -> "running or waiting for a CPU";
state_name("S") -> "sleeping";
state_name("D") -> "waiting on the disk";
state_name("T") -> "stopped";
state_name("t") -> "stopped by a debugger";
state_name("Z") -> "exited";
state_name(_) -> "in another state".

-spec bytes(non_neg_integer() | unknown) -> iolist().
bytes(unknown) -> "unknown bytes";
bytes(B) -> kprof_alert:bytes(B).
