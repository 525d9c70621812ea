%%% @doc The owner of the port to the C program `kprof_sink'.
%%%
%%% One registered gen_server, `kprof_sink', opens
%%% `priv/kprof_sink' with
%%% `open_port({spawn_executable, Path}, [binary, {packet,4}, exit_status, use_stdio])'
%%% and keeps it open. The port has two uses:
%%%
%%% <ul>
%%% <li>it is the tracer: give `{tracer, kprof_sink:port()}' to
%%%     `erlang:trace/3' and the VM writes every trace message to the sink,
%%%     one `term_to_binary' frame per event, without passing through any
%%%     Erlang process;</li>
%%% <li>it takes commands: {@link command/2} writes
%%%     `term_to_binary({kprof, Ref, Cmd})' in the same stream, and the sink
%%%     answers with `{kprof_reply, Ref, Reply}' once every frame before
%%%     the command has been processed (see doc/internals-protocol.md).</li>
%%% </ul>
%%%
%%% Safety: a caller never waits longer than its timeout (default 5000 ms,
%%% application env `call_timeout'); when the sink dies every pending
%%% caller gets `{error, {sink_down, Status}}', subscribers get
%%% `{kprof_alert, sink_down, #{what => sink_status, value => Status,
%%% status => Status, ...}}' and the port is
%%% reopened, at most 5 times in 10 s; past that the server stops with
%%% `{sink_restart_limit, ...}' and its supervisor takes over. Tracing set
%%% up with the old port is gone with it (the VM drops a dead tracer).
%%%
%%% Unsolicited `{kprof_alert, Kind, Info}' frames from the sink are sent,
%%% in the one shape of kprof's alerts ({@link kprof_alert}: `what',
%%% `value', `bound', `message' and the sink's own keys), to the processes
%%% that called {@link subscribe/0}
%%% (`kprof_guard' among them, which decides whether one aborts tracing and
%%% says so); they are logged at `debug' level only.
%%%
%%% == The ring ==
%%%
%%% The server also owns the sink's ring: the shared memory the
%%% `kprof_tracer' NIF writes trace events into (doc/internals-ring.md).
%%% {@link tracer/0} gives the tracer every tracing mode uses:
%%% `{tracer, kprof_tracer, Gen}', the ring opened in the sink on first use
%%% and kept while the sink lives, or `{tracer, Port}' when the application
%%% environment says `{tracer, port}', when the NIF is not built, or when
%%% no ring could be set up (said in a warning). When tracing is detached
%%% (an abort, the end of a mode), the next call makes a new generation
%%% live on the same ring. When the sink dies the ring goes with it.
-module(kprof_sink).
-behaviour(gen_server).

%% ?KPROF_SINK_ATOMS: every atom the sink may send (generated from its sources).
-include("kprof_sink_atoms.hrl").

%% The protocol this module speaks, port/core/ks.h's KS_PROTOCOL: a sink that
%% answers `version' with another is refused at its start (doc/internals-protocol.md).
-define(PROTOCOL, 2).

%% PUBLIC
-export([start_link/0, start_link/1,
         port/0, tracer/0, command/1, command/2, command/3, send/1, restart/1,
         subscribe/0, unsubscribe/0,
         info/0, default_path/0]).
%% Internal: the atoms the sink's frames may hold.
-export([sink_atoms/0]).
%% gen_server callbacks
-export([init/1, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2, code_change/3]).

-export_type([opts/0, command/0, down_status/0]).

-define(SERVER, ?MODULE).
-define(DEFAULT_TIMEOUT, 5000).
%% Extra time given to gen_server:call/3 beyond the server's own timer, so
%% the server's `{error, timeout}' normally wins over the call's exit.
-define(CALL_MARGIN, 1000).
-define(MAX_RESTARTS, 5).
%% How long a restart waits for `kill -KILL' to exit.
-define(KILL_WAIT, 5000).
-define(RESTART_PERIOD_MS, 10000).
%% Commands whose answers may name atoms this node does not know (decode/2).
-define(ATOM_MAKERS, [flame_replay, sample_write]).

-type opts() :: #{path => file:filename_all() | default, % default: priv/kprof_sink
                  args => [string()]}.                   % default: []
-type command() :: ping | version | stats | reset | sync | calls | term().
-type down_status() :: non_neg_integer()      % the sink's exit status
                     | port_closed            % the port was gone when writing
                     | {exit, term()}         % the port exited without a status
                     | {killed, term()}.      % restart/1 killed it, for this reason

-record(pending, {from :: gen_server:from() | ring_open | {fence, pid()},
                  timer :: reference(),
                  atoms = false :: boolean(),     % a replay's: see decode/2
                  call :: kprof_sink_stall:call() | undefined}).   % said if it times out

-record(state, {port :: port(),
                path :: file:filename_all(),
                args :: [string()],
                pending = #{} :: #{reference() => #pending{}},
                subs = #{} :: #{pid() => reference()},
                %% Subscribers whose fence (subscribe/0) the sink has not
                %% answered yet: the fence's ref.
                fenced = #{} :: #{pid() => reference()},
                %% Sends the commands a busy port did not take, in order.
                writer :: pid() | undefined,
                restarts = [] :: [integer()],     % monotonic ms of reopens
                os_pid :: integer() | undefined,  % the sink's, read when the port opened
                %% Monotonic ms of the last timeout said (kprof_sink_stall).
                stall_said :: integer() | undefined,
                %% The tracer NIF's ring in this sink: none, being opened (the
                %% callers of tracer/0 waiting), or open under a generation.
                ring = none :: none | {opening, [gen_server:from()]}
                             | {open, pos_integer()}}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Start the server with the options of the application environment
%% (`sink_path', `sink_args').
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    start_link(env_opts()).

%% @doc Start the server, registered as `kprof_sink', and open the port.
%% A relative `path' is made absolute now, against the current directory:
%% a restart after a `file:set_cwd/1' runs the same program.
%% Returns `{error, {sink_not_built, Path}}' when the binary is missing, and
%% `{error, {sink_not_answering, Path, Why}}' when the program does not
%% answer a `version' command as kprof_sink does within the `call_timeout'
%% (it exited, or it is some other program; `Why = {protocol, Sink, Kprof}'
%% for a sink of another protocol version, doc/internals-protocol.md), and `{error, {sink_cannot_run,
%% Path, #{exit_status => Status, output => Output}}}' when it exited with a
%% failure before it answered: `Output' is what it printed when run once
%% more (a missing shared library: the loader's own words).
-spec start_link(opts()) -> {ok, pid()} | {error, term()}.
start_link(Opts) when is_map(Opts) ->
    Path = resolve_path(maps:get(path, Opts, default)),
    case filelib:is_regular(Path) of
        true ->
            gen_server:start_link({local, ?SERVER}, ?MODULE, Opts#{path => Path}, []);
        false ->
            %% Said here rather than by a crashing init/1: one clear line.
            Reason = {sink_not_built, Path},
            kprof_sink_os:log_open_error(Reason),
            {error, Reason}
    end.

%% @doc The port to use as `{tracer, Port}'. It changes when the sink is
%% restarted.
-spec port() -> port() | {error, not_running}.
port() ->
    %% Kept outside the server too: a server stuck on a busy port still
    %% leaves the port reachable (the guard needs it to turn tracing off).
    case persistent_term:get({?MODULE, port}, undefined) of
        Port when is_port(Port) -> Port;
        _ -> safe_call(port, ?DEFAULT_TIMEOUT)
    end.

%% @doc The tracer to give `erlang:trace/3' (and, for a meta pattern, to
%% derive the meta tracer from): `{tracer, kprof_tracer, Gen}', whose events
%% go through the ring, or `{tracer, Port}' (see the module doc). Opens the
%% ring on first use; returns within the `call_timeout'.
-spec tracer() -> {tracer, port()} | {tracer, kprof_tracer, pos_integer()} | {error, term()}.
tracer() ->
    safe_call(tracer, default_timeout() + ?CALL_MARGIN).

%% @equiv command(Cmd, CallTimeout)
%% @doc Send a command with the default timeout (application env
%% `call_timeout', 5000 ms).
-spec command(command()) -> term().
command(Cmd) ->
    command(Cmd, default_timeout()).

%% @doc Send `Cmd' to the sink and wait at most `Timeout' ms for its reply.
%% Returns the sink's reply, or `{error, timeout}',
%% `{error, {sink_down, Status}}' or `{error, not_running}'.
-spec command(command(), non_neg_integer()) -> term().
command(Cmd, Timeout) when is_integer(Timeout), Timeout >= 0 ->
    safe_call({command, Cmd, Timeout}, Timeout + ?CALL_MARGIN).

%% @doc As {@link command/2}; with `[nosuspend]' a command meets a busy port
%% (the VM-side queue past its high mark) with `{error, busy}' instead of
%% suspending the server until the sink catches up. For watchers.
-spec command(command(), non_neg_integer(), [nosuspend]) -> term().
command(Cmd, Timeout, [nosuspend]) when is_integer(Timeout), Timeout >= 0 ->
    safe_call({command, Cmd, Timeout, nosuspend}, Timeout + ?CALL_MARGIN).

%% @doc Write `Cmd' to the sink, in order with every other command, and
%% return without waiting for its reply (the reply is dropped when it
%% comes). The server never suspends: a busy port gets the command through
%% the writer process, still in order. For commands whose answer nobody
%% needs, e.g. the guard's `{limits, 0, 0, 0}' when tracing stops.
-spec send(command()) -> ok | {error, term()}.
send(Cmd) ->
    safe_call({send, Cmd}, ?DEFAULT_TIMEOUT).

%% @doc Kill the sink (SIGKILL to its OS process) because it stopped
%% answering, and go through a sink death at once, without waiting for the
%% old port to close (as a port tracer it may be minutes behind): pending
%% calls fail with `{error, {sink_down, {killed, Why}}}', subscribers get a
%% `sink_down' alert, a new sink is started before this returns. Logged
%% with `Why'.
-spec restart(term()) -> ok | {error, term()}.
restart(Why) ->
    %% The kill (KILL_WAIT at most), then the new sink's handshake.
    safe_call({restart, Why}, ?KILL_WAIT + default_timeout() + ?CALL_MARGIN).

%% @doc Send `{kprof_alert, Kind, Info}' to the caller for every alert of
%% the sink, `Kind = sink_down' included (`Info': see {@link kprof_alert}), until {@link unsubscribe/0} or
%% the caller's death. Only the alerts of what the sink read after the call:
%% a fence (a `ping', in order with every command) goes to the sink, and
%% until its answer comes back the sink's alerts are not passed on to the
%% caller, as they were about events and commands before it (an overload
%% alert about the ring's drops in a capture that ended would abort the
%% next one). `sink_down' is always passed on.
-spec subscribe() -> ok | {error, not_running}.
subscribe() ->
    safe_call({subscribe, self()}, ?DEFAULT_TIMEOUT).

%% @doc Stop the alerts started by {@link subscribe/0}.
-spec unsubscribe() -> ok | {error, not_running}.
unsubscribe() ->
    safe_call({unsubscribe, self()}, ?DEFAULT_TIMEOUT).

%% @doc What the server holds: the port, its OS pid, the binary's path,
%% the number of pending calls, the subscribers, those whose fence the sink
%% has not answered yet ({@link subscribe/0}) and the number of reopens in
%% the last 10 s.
-spec info() -> #{port := port(), os_pid := integer() | undefined,
                  path := file:filename_all(), pending := non_neg_integer(),
                  subscribers := [pid()], fenced := [pid()],
                  restarts := non_neg_integer()}
              | {error, not_running}.
info() ->
    safe_call(info, ?DEFAULT_TIMEOUT).

%% @doc Where the binary is looked for: `code:priv_dir(kprof)', or
%% `../priv' beside this module's beam when kprof is not an OTP library
%% directory (e.g. `erlang/ebin' in the source tree).
-spec default_path() -> file:filename().
default_path() ->
    filename:join(priv_dir(), "kprof_sink").

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% GEN_SERVER CALLBACKS       %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%

%% @private
-spec init(opts()) -> {ok, #state{}} | {stop, term()}.
init(Opts) ->
    process_flag(trap_exit, true),
    Path = resolve_path(maps:get(path, Opts, default)),
    Args = maps:get(args, Opts, []),
    %% A ring of a killed predecessor's sink is nobody's now, and so is its
    %% sink.
    _ = release_ring(),
    _ = predecessor_gone(),
    case open_checked(Path, Args) of
        {ok, Port, OsPid} ->
            {ok, #state{port = Port, path = Path, args = Args, os_pid = OsPid}};
        {error, Reason} ->
            kprof_sink_os:log_open_error(Reason),
            {stop, Reason}
    end.

%% @private
-spec handle_call(term(), gen_server:from(), #state{}) ->
          {reply, term(), #state{}} | {noreply, #state{}}.
handle_call({command, Cmd, Timeout}, From, S) ->
    send_command(Cmd, Timeout, [], From, S);
handle_call({command, Cmd, Timeout, nosuspend}, From, S) ->
    send_command(Cmd, Timeout, [nosuspend], From, S);
handle_call({send, Cmd}, _From, S) ->
    send_only(Cmd, S);
handle_call(port, _From, S = #state{port = Port}) ->
    {reply, Port, S};
handle_call(tracer, From, S) ->
    tracer(From, S);
handle_call({restart, Why}, _From, S = #state{os_pid = OsPid, port = Port}) ->
    logger:warning("kprof_sink: killing the sink (OS pid ~p): ~0p", [OsPid, Why]),
    Killed = kprof_sink_os:kill(OsPid, ?KILL_WAIT),
    %% The old port's exit_status is not waited for: as a port tracer it
    %% may sit behind the VM's backlog of trace messages for it, drained in
    %% quadratic time (minutes), and every command would wait behind it.
    %% It is dropped now (its late messages are ignored) and a new sink
    %% opened at once.
    abandon(Port),
    case sink_down({killed, Why}, S) of
        {noreply, S1} -> {reply, Killed, S1};
        {stop, Reason, S1} -> {stop, Reason, Killed, S1}
    end;
handle_call({subscribe, Pid}, _From, S = #state{subs = Subs}) when is_map_key(Pid, Subs) ->
    {reply, ok, S};
handle_call({subscribe, Pid}, _From, S) ->
    {reply, ok, fence(Pid, add_subscriber(Pid, S))};
handle_call({unsubscribe, Pid}, _From, S) ->
    {reply, ok, remove_subscriber(Pid, S)};
handle_call(info, _From, S) ->
    {reply, state_info(S), S};
handle_call(Other, _From, S) ->
    {reply, {error, {bad_call, Other}}, S}.

%% @private
-spec handle_cast(term(), #state{}) -> {noreply, #state{}}.
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
-spec handle_info(term(), #state{}) -> {noreply, #state{}} | {stop, term(), #state{}}.
handle_info({Port, {data, Bin}}, S = #state{port = Port}) ->
    {noreply, handle_frame(decode(Bin, S), S)};
handle_info({timeout, _TRef, {call, Ref}}, S) ->
    {noreply, expire(Ref, S)};
handle_info({writer_idle, W}, S = #state{writer = W}) ->
    W ! stop,
    {noreply, S#state{writer = undefined}};
handle_info({'EXIT', W, _}, S = #state{writer = W}) ->
    {noreply, S#state{writer = undefined}};
handle_info({Port, {exit_status, Status}}, S = #state{port = Port}) ->
    sink_down(Status, S);
handle_info({'EXIT', Port, Reason}, S = #state{port = Port}) ->
    sink_down({exit, Reason}, S);
handle_info({'DOWN', MRef, process, Pid, _}, S = #state{subs = Subs}) ->
    case Subs of
        #{Pid := MRef} -> {noreply, S#state{subs = maps:remove(Pid, Subs),
                                            fenced = maps:remove(Pid, S#state.fenced)}};
        _ -> {noreply, S}
    end;
handle_info(_Msg, S) ->
    %% Messages of an earlier port ({'EXIT', OldPort, normal}, ...).
    {noreply, S}.

%% @private
-spec terminate(term(), #state{}) -> ok.
terminate(_Reason, #state{port = Port}) ->
    %% The port is killed, not closed: a closed port stays until its queue
    %% is written out, and a port tracer's backlog there is nobody's now.
    %% The sink exits by itself when its stdin closes.
    _ = release_ring(),
    _ = persistent_term:erase({?MODULE, port}),
    _ = persistent_term:erase({?MODULE, os_pid}),
    abandon(Port).

%% @private
-spec code_change(term(), #state{}, term()) -> {ok, #state{}}.
code_change(_OldVsn, S, _Extra) ->
    {ok, S}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%%% Calls

-spec safe_call(term(), timeout()) -> term().
safe_call(Request, Timeout) ->
    try
        gen_server:call(?SERVER, Request, Timeout)
    catch
        exit:{noproc, _} -> {error, not_running};
        exit:{timeout, _} -> kprof_late_call:say(?SERVER, Request, Timeout), {error, timeout};
        exit:{Reason, _} -> {error, {not_running, Reason}}
    end.

-spec send_command(command(), non_neg_integer(), [nosuspend], gen_server:from(), #state{}) ->
          {reply, term(), #state{}} | {noreply, #state{}}.
send_command(Cmd, Timeout, PortOpts, From, S = #state{pending = Pending, writer = W}) ->
    %% The server never suspends on a busy port: it would stop reading the
    %% sink's replies and alerts. A command the port does not take at once
    %% goes to a writer process that may suspend instead (and keeps the
    %% order); a watcher's (nosuspend) gets {error, busy}.
    Ref = make_ref(),
    Bin = term_to_binary({kprof, Ref, Cmd}),
    P = (pending(From, Timeout, Ref))#pending{atoms = is_tuple(Cmd) andalso
                                                  lists:member(element(1, Cmd), ?ATOM_MAKERS),
                                              call = #{command => command_tag(Cmd),
                                                       timeout_ms => Timeout}},
    case W =:= undefined andalso try_send(Bin, S) of
        true ->
            {noreply, S#state{pending = Pending#{Ref => P}}};
        closed ->
            %% The port is closing; its exit_status is on its way.
            {reply, {error, {sink_down, port_closed}}, S};
        _Busy when PortOpts =:= [nosuspend] ->
            {reply, {error, busy}, S};
        _Busy ->
            S1 = ensure_writer(S),
            S1#state.writer ! {send, Bin},
            {noreply, S1#state{pending = Pending#{Ref => P}}}
    end.

%% As send_command/5, with no caller waiting: the reply's Ref is nobody's.
-spec send_only(command(), #state{}) -> {reply, ok | {error, term()}, #state{}}.
send_only(Cmd, S) ->
    case write_ordered(term_to_binary({kprof, make_ref(), Cmd}), S) of
        {ok, S1} -> {reply, ok, S1};
        closed -> {reply, {error, {sink_down, port_closed}}, S}
    end.

%% Bin written in order with every other command: at once, or through the
%% writer when the port is busy (or the writer still has commands to send).
-spec write_ordered(binary(), #state{}) -> {ok, #state{}} | closed.
write_ordered(Bin, S = #state{writer = W}) ->
    case W =:= undefined andalso try_send(Bin, S) of
        true ->
            {ok, S};
        closed ->
            closed;
        _Busy ->
            S1 = ensure_writer(S),
            S1#state.writer ! {send, Bin},
            {ok, S1}
    end.

pending(From, Timeout, Ref) ->
    #pending{from = From, timer = erlang:start_timer(Timeout, self(), {call, Ref})}.

-spec try_send(binary(), #state{}) -> boolean() | closed.
try_send(Bin, #state{port = Port}) ->
    try erlang:port_command(Port, Bin, [nosuspend])
    catch error:badarg -> closed
    end.

ensure_writer(S = #state{writer = W}) when is_pid(W) -> S;
ensure_writer(S = #state{port = Port}) ->
    Owner = self(),
    S#state{writer = spawn_link(fun() -> writer(Owner, Port) end)}.

%% Any process may write to a port; this one may be suspended while the
%% port is busy. Idle for a while, it asks to stop: what the server sent
%% before it saw the request still comes first.
writer(Owner, Port) ->
    receive
        {send, Bin} -> send_now(Port, Bin), writer(Owner, Port);
        stop -> ok
    after 100 ->
        Owner ! {writer_idle, self()},
        receive
            {send, Bin} -> send_now(Port, Bin), writer(Owner, Port);
            stop -> ok
        end
    end.

%% A port gone (closed, or the sink dead) drops the command: whatever
%% port_command/2 raises.
-spec send_now(port(), binary()) -> ok.
send_now(Port, Bin) ->
    _ = try erlang:port_command(Port, Bin) catch _:_ -> false end,
    ok.

-spec expire(reference(), #state{}) -> #state{}.
expire(Ref, S = #state{pending = Pending}) ->
    case maps:take(Ref, Pending) of
        {#pending{from = ring_open}, Rest} ->
            ring_opened({error, timeout}, S#state{pending = Rest});
        {#pending{from = {fence, Pid}}, Rest} ->
            unfence(Pid, Ref, S#state{pending = Rest});
        {#pending{from = From, call = Call}, Rest} ->
            gen_server:reply(From, {error, timeout}),
            say_stall(Call, S#state{pending = Rest});
        error ->
            S
    end.

%% A caller's timeout says what the sink was doing, once in 10 s.
-spec say_stall(kprof_sink_stall:call(), #state{}) -> #state{}.
say_stall(Call, S = #state{stall_said = Said}) ->
    Now = erlang:monotonic_time(millisecond),
    case Said =:= undefined orelse Now - Said >= 10000 of
        true ->
            #state{port = Port, os_pid = OsPid, writer = W} = S,
            _ = kprof_sink_stall:say(Port, OsPid, W, self(), Call),
            S#state{stall_said = Now};
        false ->
            S
    end.

%% The command's name for a stall report: its atom, or its tuple's tag.
-spec command_tag(command()) -> atom().
command_tag(Cmd) when is_atom(Cmd) -> Cmd;
command_tag(Cmd) when is_tuple(Cmd), is_atom(element(1, Cmd)) -> element(1, Cmd);
command_tag(_) -> command.

-spec reply(reference(), term(), #state{}) -> #state{}.
reply(Ref, Reply, S = #state{pending = Pending}) ->
    case maps:take(Ref, Pending) of
        {#pending{from = ring_open, timer = TRef}, Rest} ->
            _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
            ring_opened(Reply, S#state{pending = Rest});
        {#pending{from = {fence, Pid}, timer = TRef}, Rest} ->
            _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
            unfence(Pid, Ref, S#state{pending = Rest});
        {#pending{from = From, timer = TRef}, Rest} ->
            _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
            gen_server:reply(From, Reply),
            S#state{pending = Rest};
        error ->
            %% The caller timed out already, or someone wrote a command
            %% straight to the port.
            S
    end.

-spec fail_pending(term(), #state{}) -> #state{}.
fail_pending(Error, S = #state{pending = Pending}) ->
    maps:foreach(fun(_Ref, #pending{from = From, timer = TRef}) ->
                         _ = erlang:cancel_timer(TRef, [{async, true}, {info, false}]),
                         case From of
                             ring_open -> ok;
                             {fence, _} -> ok;
                             _ -> gen_server:reply(From, Error)
                         end
                 end, Pending),
    %% The sink is gone: no alert of it is to come, the fences are down.
    S#state{pending = #{}, fenced = #{}}.

%%% The ring

%% The tracer for a caller of tracer/0: the ring's, opening it first if need
%% be (the reply then waits for the sink's answer), or the port's.
-spec tracer(gen_server:from(), #state{}) -> {reply, term(), #state{}} | {noreply, #state{}}.
tracer(From, S = #state{port = Port, ring = Ring}) ->
    case application:get_env(kprof, tracer, ring) =:= ring andalso kprof_tracer:available() of
        false ->
            {reply, {tracer, Port}, S};
        true ->
            case Ring of
                {open, Gen} ->
                    case live_gen(Gen) of
                        {ok, Live} -> {reply, {tracer, kprof_tracer, Live}, S#state{ring = {open, Live}}};
                        closed -> open_ring(From, S#state{ring = none})
                    end;
                {opening, Waiting} ->
                    {noreply, S#state{ring = {opening, [From | Waiting]}}};
                none ->
                    open_ring(From, S)
            end
    end.

%% Gen while it is live; a new generation on the same ring after a detach.
-spec live_gen(pos_integer()) -> {ok, pos_integer()} | closed.
live_gen(Gen) ->
    case kprof_tracer:live() of
        Gen ->
            {ok, Gen};
        _ ->
            New = erlang:unique_integer([positive]),
            case kprof_tracer:resume(New) of
                ok -> {ok, New};
                {error, _} -> closed
            end
    end.

-spec open_ring(gen_server:from(), #state{}) -> {noreply, #state{}} | {reply, term(), #state{}}.
open_ring(From, S = #state{pending = Pending}) ->
    %% A ring per scheduler thread and a shared one (kprof_tracer:rings/1).
    {Bytes, Rings} = kprof_tracer:rings(),
    Ref = make_ref(),
    case try_send(term_to_binary({kprof, Ref, {ring_open, Bytes, Rings}}), S) of
        true ->
            P = pending(ring_open, default_timeout(), Ref),
            {noreply, S#state{pending = Pending#{Ref => P}, ring = {opening, [From]}}};
        _ ->
            %% Closing, or too busy to take a command at once: no ring now.
            {reply, fallback(busy, S), S}
    end.

%% The sink's answer to ring_open: the NIF maps the ring, the name goes.
-spec ring_opened(term(), #state{}) -> #state{}.
ring_opened(Reply, S0 = #state{ring = {opening, Waiting}}) ->
    Gen = erlang:unique_integer([positive]),
    {Tracer, Ring, S} =
        case Reply of
            {ok, Name} when is_binary(Name) ->
                case kprof_tracer:attach(Name, Gen) of
                    ok ->
                        {reply, _, S1} = send_only(ring_unlink, S0),
                        ok = kprof_tracer:note_smaller_rings(),
                        {{tracer, kprof_tracer, Gen}, {open, Gen}, S1};
                    {error, Why} ->
                        {reply, _, S1} = send_only(ring_close, S0),
                        {fallback({attach, Why}, S1), none, S1}
                end;
            Other ->
                {fallback({ring_open, Other}, S0), none, S0}
        end,
    _ = [gen_server:reply(From, Tracer) || From <- Waiting],
    S#state{ring = Ring};
ring_opened(_Reply, S) ->
    S.

-spec fallback(term(), #state{}) -> {tracer, port()}.
fallback(Why, #state{port = Port}) ->
    logger:warning("kprof: no ring for the tracer NIF (~p); tracing to the sink's port, "
                   "which costs the traced processes more per event", [Why]),
    {tracer, Port}.

%% Whatever ring the NIF has mapped is let go (the sink that made it is gone).
-spec release_ring() -> ok.
release_ring() ->
    _ = try kprof_tracer:release() catch _:_ -> ok end,
    ok.

%%% Frames from the sink

%% `safe': the sink makes no atom here. Every atom it may send exists
%% (sink_atoms/0) or came from this VM (modules, functions, names), but for
%% a replay's (decode/2).
-spec decode(binary()) -> {ok, term()} | {error, bad_frame}.
decode(Bin) ->
    try
        {ok, binary_to_term(Bin, [safe])}
    catch
        error:badarg -> {error, bad_frame}
    end.

%% A replay's answer (kprof:replay/2) names the recorded code's modules and
%% functions (its top rows), which this node may not know, and so does a
%% sampled profile's (kprof_sample: C functions as `{'[C]', Symbol, 0}'):
%% while one is pending, a frame `safe' refuses is read anyway, making at
%% most a few atoms per row asked for.
-spec decode(binary(), #state{}) -> {ok, term()} | {error, bad_frame}.
decode(Bin, #state{pending = Pending}) ->
    Replay = lists:any(fun(#pending{atoms = A}) -> A end, maps:values(Pending)),
    case decode(Bin) of
        {error, bad_frame} = Error when Replay ->
            try {ok, binary_to_term(Bin)} catch error:badarg -> Error end;
        Decoded ->
            Decoded
    end.

%% @private Every atom the sink's sources may write into a frame
%% (scripts/gen_sink_atoms.escript): they exist once this module is loaded,
%% so decode/1's `binary_to_term(_, [safe])' reads every reply.
-spec sink_atoms() -> [atom()].
sink_atoms() ->
    ?KPROF_SINK_ATOMS.

-spec handle_frame({ok, term()} | {error, bad_frame}, #state{}) -> #state{}.
handle_frame({ok, {kprof_reply, Ref, Reply}}, S) when is_reference(Ref) ->
    reply(Ref, Reply, S);
handle_frame({ok, {kprof_alert, Kind, Info}}, S) ->
    %% kprof_guard (a subscriber) says what an alert meant, if anything.
    logger:debug("kprof_sink alert ~p: ~p", [Kind, Info]),
    Msg = {kprof_alert, Kind, kprof_alert:from_map(Kind, Info)},
    maps:foreach(fun(Pid, _MRef) -> is_map_key(Pid, S#state.fenced) orelse (Pid ! Msg) end,
                 S#state.subs),
    S;
handle_frame({ok, Other}, S) ->
    logger:warning("kprof_sink: unexpected frame from the sink: ~P", [Other, 20]),
    S;
handle_frame({error, bad_frame}, S) ->
    logger:warning("kprof_sink: the sink wrote a frame that is not an external term "
                   "(or names an atom this node does not know)"),
    S.

%%% Subscribers

-spec add_subscriber(pid(), #state{}) -> #state{}.
add_subscriber(Pid, S = #state{subs = Subs}) ->
    S#state{subs = Subs#{Pid => erlang:monitor(process, Pid)}}.

%% A new subscriber's fence: a ping written in order with every command;
%% the sink answers it once it has read every frame and ring event before
%% it, and the alerts it sent before that answer are not the subscriber's.
-spec fence(pid(), #state{}) -> #state{}.
fence(Pid, S) ->
    Ref = make_ref(),
    case write_ordered(term_to_binary({kprof, Ref, ping}), S) of
        {ok, S1 = #state{pending = Pending, fenced = Fenced}} ->
            P = #pending{from = {fence, Pid},
                         timer = erlang:start_timer(default_timeout(), self(), {call, Ref})},
            S1#state{pending = Pending#{Ref => P}, fenced = Fenced#{Pid => Ref}};
        closed ->
            %% The port is closing: its sink_down is on its way, and no
            %% alert of it will come.
            S
    end.

%% The fence answered (or timed out, or the sink died: the pending calls
%% failed): the sink's alerts go to the subscriber from now on.
-spec unfence(pid(), reference(), #state{}) -> #state{}.
unfence(Pid, Ref, S = #state{fenced = Fenced}) ->
    case Fenced of
        #{Pid := Ref} -> S#state{fenced = maps:remove(Pid, Fenced)};
        _ -> S
    end.

-spec remove_subscriber(pid(), #state{}) -> #state{}.
remove_subscriber(Pid, S = #state{subs = Subs}) ->
    case maps:take(Pid, Subs) of
        {MRef, Rest} ->
            erlang:demonitor(MRef, [flush]),
            S#state{subs = Rest, fenced = maps:remove(Pid, S#state.fenced)};
        error ->
            S
    end.

-spec notify(term(), #state{}) -> ok.
notify(Msg, #state{subs = Subs}) ->
    maps:foreach(fun(Pid, _MRef) -> Pid ! Msg end, Subs).

%%% The sink's death and restarts

-spec sink_down(down_status(), #state{}) ->
          {noreply, #state{}} | {stop, term(), #state{}}.
sink_down(Status, S0) ->
    N = maps:size(S0#state.pending),
    logger:warning("kprof_sink: the sink exited (status ~p); "
                   "~b pending call(s) failed; tracing to its port stopped",
                   [Status, N]),
    _ = is_pid(S0#state.writer) andalso exit(S0#state.writer, kill),
    _ = release_ring(),
    _ = case S0#state.ring of
            {opening, Waiting} -> [gen_server:reply(F, {error, {sink_down, Status}}) || F <- Waiting];
            _ -> ok
        end,
    S1 = fail_pending({error, {sink_down, Status}}, S0#state{writer = undefined, ring = none}),
    notify({kprof_alert, sink_down,
            kprof_alert:new(sink_down, sink_status, Status, undefined, #{status => Status})}, S1),
    reopen(Status, S1).

-spec reopen(down_status(), #state{}) ->
          {noreply, #state{}} | {stop, term(), #state{}}.
reopen(Status, S = #state{path = Path, args = Args, restarts = Restarts}) ->
    Now = erlang:monotonic_time(millisecond),
    Recent = [T || T <- Restarts, Now - T < ?RESTART_PERIOD_MS],
    case length(Recent) >= ?MAX_RESTARTS of
        true ->
            Reason = {sink_restart_limit,
                      #{restarts => ?MAX_RESTARTS,
                        period_ms => ?RESTART_PERIOD_MS,
                        last_status => Status}},
            logger:error("kprof_sink: the sink died ~b times in ~b ms; giving up",
                         [?MAX_RESTARTS + 1, ?RESTART_PERIOD_MS]),
            {stop, Reason, S};
        false ->
            case open_checked(Path, Args) of
                {ok, Port, OsPid} ->
                    logger:notice("kprof_sink: sink restarted as ~p", [Port]),
                    {noreply, S#state{port = Port, restarts = [Now | Recent],
                                      os_pid = OsPid}};
                {error, Reason} ->
                    kprof_sink_os:log_open_error(Reason),
                    {stop, Reason, S}
            end
    end.

%%% Opening the port

%% The port and its program's OS pid, read once here (persistent_term keeps
%% both for a successor: predecessor_gone/0).
-spec open(file:filename_all(), [string()]) ->
          {ok, port(), integer() | undefined} | {error, term()}.
open(Path, Args) ->
    case filelib:is_regular(Path) of
        false ->
            {error, {sink_not_built, Path}};
        true ->
            try open_port({spawn_executable, Path},
                          [{args, Args}, binary, {packet, 4}, exit_status, use_stdio]) of
                Port ->
                    OsPid = kprof_sink_os:os_pid(Port),
                    persistent_term:put({?MODULE, port}, Port),
                    persistent_term:put({?MODULE, os_pid}, OsPid),
                    {ok, Port, OsPid}
            catch
                error:Reason -> {error, {sink_open_failed, Path, Reason}}
            end
    end.

%% The port, once the program behind it answered `version' as kprof_sink
%% does (a wrong sink_path, a program that exits at once, are said now, not
%% by restarts in a loop).
-spec open_checked(file:filename_all(), [string()]) ->
          {ok, port(), integer() | undefined} | {error, term()}.
open_checked(Path, Args) ->
    case open(Path, Args) of
        {ok, Port, OsPid} ->
            Ref = make_ref(),
            Timeout = default_timeout(),
            Answer = try erlang:port_command(Port, term_to_binary({kprof, Ref, version})) of
                         true -> handshake(Port, Ref, Path, Timeout)
                     catch
                         error:badarg -> not_answering(Port, Path, kprof_sink_os:exited(Port))
                     end,
            case kprof_sink_os:why_not_running(Answer, Path, Args) of
                {ok, Port} -> {ok, Port, OsPid};
                {error, _} = Error -> Error
            end;
        Error ->
            Error
    end.

handshake(Port, Ref, Path, Timeout) ->
    receive
        {Port, {data, Bin}} ->
            case decode(Bin) of
                {ok, {kprof_reply, Ref, {kprof_sink, _Vsn, ?PROTOCOL}}} -> {ok, Port};
                {ok, {kprof_reply, Ref, {kprof_sink, _Vsn, Proto}}} ->
                    not_answering(Port, Path, {protocol, Proto, ?PROTOCOL});
                {ok, {kprof_reply, Ref, Other}} -> not_answering(Port, Path, {version, Other});
                _ -> handshake(Port, Ref, Path, Timeout)   % an alert: not the answer yet
            end;
        {Port, {exit_status, Status}} ->
            not_answering(Port, Path, {exit_status, Status});
        {'EXIT', Port, Reason} ->
            %% The program was gone when the version command reached its
            %% pipe: the write failed (epipe) and the port closed without an
            %% exit_status (a race, seen 1 time in 400 under load).
            not_answering(Port, Path, {exit, Reason})
    after Timeout ->
        not_answering(Port, Path, timeout)
    end.

not_answering(Port, Path, Why) ->
    _ = try port_close(Port) catch _:_ -> ok end,
    receive {'EXIT', Port, _} -> ok after 0 -> ok end,
    _ = persistent_term:erase({?MODULE, port}),
    _ = persistent_term:erase({?MODULE, os_pid}),
    {error, {sink_not_answering, Path, Why}}.

%% A predecessor killed before its terminate/2 ran left its port to the
%% VM, which keeps a port whose owner died until its queue is written out
%% and takes no kill after that: behind a port tracer's backlog that is
%% minutes of the VM's time, with the old sink frozen it is never. Its sink
%% is killed instead; the port's next write fails and the port goes.
-spec predecessor_gone() -> ok.
predecessor_gone() ->
    Old = persistent_term:get({?MODULE, port}, undefined),
    OsPid = persistent_term:get({?MODULE, os_pid}, undefined),
    case is_port(Old) andalso is_integer(OsPid) andalso lists:member(Old, erlang:ports()) of
        true ->
            logger:warning("kprof_sink: killing the sink of a predecessor that was killed "
                           "(OS pid ~b): its port ~p is nobody's", [OsPid, Old]),
            _ = kprof_sink_os:kill(OsPid, ?KILL_WAIT),
            ok;
        false ->
            ok
    end.

%% A port given up on: unlinked, so that its exit is no signal here, and
%% told to close without writing out its queue (when the VM gets to it).
-spec abandon(port()) -> ok.
abandon(Port) ->
    true = unlink(Port),
    _ = try exit(Port, kill) catch _:_ -> true end,
    ok.

-spec resolve_path(file:filename_all() | default) -> file:filename_all().
resolve_path(default) -> filename:absname(default_path());
resolve_path(Path) -> filename:absname(Path).

-spec priv_dir() -> file:filename().
priv_dir() ->
    case code:priv_dir(kprof) of
        Dir when is_list(Dir) ->
            Dir;
        {error, bad_name} ->
            case code:which(?MODULE) of
                Beam when is_list(Beam) ->
                    filename:join(filename:dirname(filename:dirname(Beam)), "priv");
                _ ->
                    "priv"
            end
    end.

-spec state_info(#state{}) -> map().
state_info(#state{port = Port, path = Path, pending = Pending,
                  subs = Subs, fenced = Fenced, restarts = Restarts, os_pid = OsPid}) ->
    Now = erlang:monotonic_time(millisecond),
    Recent = [T || T <- Restarts, Now - T < ?RESTART_PERIOD_MS],
    #{port => Port, os_pid => OsPid, path => Path,
      pending => length([F || #pending{from = F} <- maps:values(Pending),
                              not is_tuple(F) orelse element(1, F) =/= fence]),
      subscribers => maps:keys(Subs), fenced => maps:keys(Fenced),
      restarts => length(Recent)}.

%%% Environment

-spec env_opts() -> opts().
env_opts() ->
    #{path => application:get_env(kprof, sink_path, default),
      args => application:get_env(kprof, sink_args, [])}.

-spec default_timeout() -> non_neg_integer().
default_timeout() ->
    case application:get_env(kprof, call_timeout, ?DEFAULT_TIMEOUT) of
        T when is_integer(T), T >= 0 -> T;
        _ -> ?DEFAULT_TIMEOUT
    end.
