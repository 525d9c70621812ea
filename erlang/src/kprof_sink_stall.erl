%%% @doc What a sink that did not answer in time was doing, read when a call
%%% to it times out, so that the timeout says why (kprof_sink logs it, at
%%% most once every 10 s):
%%% <ul>
%%% <li>`queue_bytes': what the VM holds for the sink's port. Commands go
%%%     through the port behind trace messages: a port tracer's backlog
%%%     delays every answer until the sink has read it;</li>
%%% <li>`writer_messages': the commands a busy port did not take yet, held
%%%     by kprof_sink's writer process;</li>
%%% <li>`os': the sink's OS process, from Linux's /proc: its `state' (`"R"'
%%%     running or waiting for a CPU, `"S"' sleeping, `"D"' in the disk,
%%%     `"T"' stopped), `wchan' (the kernel function it sleeps in) and
%%%     `cpu_ms' (its user and system time since it started); `unknown'
%%%     elsewhere, or when it is gone.</li>
%%% </ul>
%%% A sink running with the queue full is behind on its input; one that
%%% sleeps with the queue full is not reading it; a queue empty says the
%%% sink itself is slow (a CPU taken by others: compare `cpu_ms' between two
%%% warnings).
-module(kprof_sink_stall).

-export([explain/3, message/2]).

-export_type([stall/0]).

-type stall() :: #{queue_bytes := non_neg_integer() | unknown,
                   writer_messages := non_neg_integer(),
                   os := stall_os()}.
-type stall_os() :: #{state := string(), wchan := string(), cpu_ms := non_neg_integer()}
                  | unknown.

%% Linux's USER_HZ, the unit of /proc/PID/stat's times: 100 on every
%% architecture it exports to user space.
-define(USER_HZ, 100).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc What the sink's port, kprof_sink's writer and the sink's OS
%% process (`OsPid', `undefined' when not known) are doing now.
-spec explain(port(), integer() | undefined, pid() | undefined) -> stall().
explain(Port, OsPid, Writer) ->
    #{queue_bytes => queue_bytes(Port),
      writer_messages => writer_messages(Writer),
      os => os_process(OsPid)}.

%% @doc A line for the log: the sink's OS pid and bound first, then the
%% figures of explain/3.
-spec message(integer() | undefined, stall()) -> iolist().
message(OsPid, #{queue_bytes := Q, writer_messages := W, os := Os}) ->
    io_lib:format("kprof_sink: the sink (OS pid ~p) did not answer in time: ~ts queued to its "
                  "port, ~b command(s) waiting to be written; ~ts",
                  [OsPid, bytes(Q), W, os_text(Os)]).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec queue_bytes(port()) -> non_neg_integer() | unknown.
queue_bytes(Port) ->
    case erlang:port_info(Port, queue_size) of
        {queue_size, Q} -> Q;
        undefined -> unknown
    end.

-spec writer_messages(pid() | undefined) -> non_neg_integer().
writer_messages(undefined) ->
    0;
writer_messages(Writer) ->
    case erlang:process_info(Writer, message_queue_len) of
        {message_queue_len, N} -> N;
        undefined -> 0
    end.

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
os_text(#{state := State, wchan := W, cpu_ms := Ms}) ->
    io_lib:format("its OS process ~ts (~ts, in ~ts), ~b ms of CPU since it started",
                  [state_name(State), State, W, Ms]).

state_name("R") -> "running or waiting for a CPU";
state_name("S") -> "sleeping";
state_name("D") -> "waiting on the disk";
state_name("T") -> "stopped";
state_name("t") -> "stopped by a debugger";
state_name("Z") -> "exited";
state_name(_) -> "in another state".

-spec bytes(non_neg_integer() | unknown) -> string().
bytes(unknown) -> "unknown bytes";
bytes(B) when B < 1024 -> integer_to_list(B) ++ " bytes";
bytes(B) when B < 1024 * 1024 -> io_lib:format("~.1f KiB", [B / 1024]);
bytes(B) -> io_lib:format("~.1f MiB", [B / (1024 * 1024)]).
