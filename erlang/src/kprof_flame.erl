%%% @doc Flame graphs of real calls, made off-node: the VM sends call,
%%% return_to, scheduling, process and GC events to the sink, which turns
%%% them into call stacks, adds up the time of every stack and writes the
%%% files itself. `kprof:flame_apply/2', `kprof:flame_capture/3' and
%%% `kprof:flame_pid/3' are the user's entry points (doc/flame.md).
%%%
%%% ```
%%%  flame_apply(Fun)      the caller, from just before Fun() to its return
%%%  flame_pid(Pids, Ms)   running processes, for Ms milliseconds
%%%  flame_capture(MFA, N) the next N calls of MFA in any process: a meta
%%%                        pattern on MFA turns the caller's flags on at the
%%%                        call and names the capture in the call's message
%%% '''
%%% Stacks are per process, the root frame names it (`name(<0.N.S>)' or
%%% `M:F/A(<0.N.S>)', what it runs); time goes to the stack that was running
%%% (`SLEEP' while scheduled out, `GC' while collecting, `WAITING_TO_RUN'
%%% for a spawned process before its first run). Option `group' merges
%%% processes at the root, `fold_recursion' folds direct recursion.
%%% Nothing but commands and the list of files crosses back into Erlang.
-module(kprof_flame).

%% PUBLIC (through kprof)
-export([apply/2, capture/3, pid/3, validate/2, planned_files/1]).
%% Internal: the frame flame_apply hides (traced/2); open => speedscope and
%% the list of formats (kprof_tiers_full too).
-export([traced/2, maybe_open/2, formats/1]).

-export_type([opts/0, format/0]).

-type format() :: folded | perf | speedscope | svg.
-type opts() ::
        #{output_format => format() | [format()] | all,  % default: all four
          output_directory => file:filename(),          % default: the cwd
          name => string(),                % files' base name (default kprof-Mode-Time-Id)
          sleep => boolean(),              % SLEEP frames (default true)
          gc => boolean(),                 % GC frames (default true)
          children => boolean(),           % follow spawned processes (default false)
          max_depth => pos_integer(),      % deeper frames: TRUNCATED (default 256)
          max_nodes => pos_integer(),      % distinct call paths (default 1,000,000)
          perf_period_us => non_neg_integer(), % perf sample period; 0: automatic
          max_procs => pos_integer(),      % processes in the capture (default 100,000)
          %% processes merged at the root, Key(N_processes): by registered name,
          %% initial call, or all in one (default initial_call with children, else pid)
          group => pid | name | initial_call | all,
          fold_recursion => boolean(),     % f;f;f written as one f (default false)
          timeout => timeout(),            % flame_capture's wait (default 30000 ms)
          open => speedscope | false,      % run the speedscope CLI on the result
          %% kprof_guard's limits (max_lag_ms, max_queue_bytes, max_memory_bytes,
          %% max_events, rate, max_seconds): past one, tracing stops and the
          %% capture ends with {error, {aborted, Kind, Files}}.
          atom() => term()}.

-define(DEFAULT_PID_MS, 3000).
-define(MAX_PID_MS, 60000).
-define(POLL_MS, 10).
%% Waiting for the sink to read the capture's events and write the files
%% (a second or two for the largest captures), and for a flame_status.
-define(WRITE_TIMEOUT, 30000).
-define(STATUS_TIMEOUT, 5000).
-define(GUARD_KEYS, kprof_guard:limit_keys()).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Run `Fun()' or `apply(M, F, Args)' traced in the calling process.
-spec apply(fun(() -> term()) | {module(), atom(), [term()]}, opts()) ->
          {ok, term(), [file:filename()]} | {error, term()}.
apply(What, Opts) ->
    case {is_runnable(What), validate(Opts, apply)} of
        {false, _} -> {error, {bad_fun, What}};
        {true, {ok, Cfg}} -> with_sink(fun() -> run_apply(What, Cfg) end);
        {true, Error} -> Error
    end.

%% @doc Trace the next `N' calls of `{M, F, Arity}' in whatever processes
%% make them.
-spec capture(mfa(), pos_integer(), opts()) -> {ok, [file:filename()]} | {error, term()}.
capture({M, F, A} = MFA, N, Opts)
  when is_atom(M), is_atom(F), is_integer(A), A >= 0, A =< 255, is_integer(N), N > 0 ->
    case validate(Opts, capture) of
        {ok, Cfg} ->
            case function_exists(MFA) of
                true -> with_sink(fun() -> run_capture(MFA, N, Cfg) end);
                false -> {error, {no_such_function, MFA}}
            end;
        Error ->
            Error
    end;
capture(MFA, N, _Opts) ->
    {error, {badarg, {MFA, N}}}.

%% @doc Trace running processes for `Millis' ms (at most 60 s).
-spec pid(pid() | [pid()], non_neg_integer() | default, opts()) ->
          {ok, [file:filename()]} | {error, term()}.
pid(Pid, Millis, Opts) when is_pid(Pid) ->
    pid([Pid], Millis, Opts);
pid(Pids, default, Opts) ->
    pid(Pids, ?DEFAULT_PID_MS, Opts);
pid(Pids, Millis, Opts) when is_list(Pids), Pids =/= [], is_integer(Millis), Millis >= 0 ->
    case {lists:all(fun is_pid/1, Pids), validate(Opts, pid)} of
        {false, _} ->
            {error, {badarg, Pids}};
        {true, {ok, Cfg}} ->
            Ms = cap_millis(Millis),
            case [P || P <- lists:usort(Pids), is_process_alive(P)] of
                [] -> {error, no_such_process};
                Alive -> with_sink(fun() -> run_pid(Alive, Ms, Cfg) end)
            end;
        {true, Error} ->
            Error
    end;
pid(Pids, Millis, _Opts) ->
    {error, {badarg, {Pids, Millis}}}.

%% @doc Check options (a map) for a mode; the result has every default filled in.
%% `{error, {unknown_options, [Key]}}' names every key it does not know,
%% `{error, {bad_option, Key, Value}}' the first bad value.
-spec validate(term(), apply | pid | capture) -> {ok, map()} | {error, term()}.
validate(Opts, _Mode) ->
    %% Keys, values and defaults: the option table's (kprof_opts).
    case kprof_opts:check(flame, Opts) of
        {ok, Checked} ->
            Cfg = maps:without(?GUARD_KEYS, Checked),
            case maps:with(?GUARD_KEYS, Opts) of
                Limits when map_size(Limits) =:= 0 -> {ok, Cfg#{limits => #{}}};
                Limits ->
                    %% The guard's limits over its defaults, as the guard merges them.
                    {ok, Merged} = kprof_guard:validate_limits(Limits),
                    {ok, Cfg#{limits => Merged}}
            end;
        {error, _} = Error ->
            Error
    end.

%% @private The wrapper flame_apply runs the function in: its frame is
%% hidden (the sink's `hide' option), so stacks start at the function.
-spec traced(fun(() -> term()) | mfa_args(), list()) ->
          {{ok, term()} | {raise, atom(), term(), list()}, integer()}.
traced(What, Flags) ->
    _ = kprof_flame_srv:set_flags(self(), Flags),
    try case What of
            {M, F, Args} -> erlang:apply(M, F, Args);
            Fun -> Fun()
        end
    of
        Result ->
            End = erlang:monotonic_time(nanosecond),
            untrace_self(),
            {{ok, Result}, End}
    catch
        Class:Reason:Stack ->
            End = erlang:monotonic_time(nanosecond),
            untrace_self(),
            {{raise, Class, Reason, Stack}, End}
    end.

%% @doc The files a capture with these (validated) options will write when
%% nothing is in the way (an existing file makes the sink add `-1', `-2',
%% ... to the base name): for callers that must say where before the end.
-spec planned_files(map()) -> [file:filename()].
planned_files(Cfg = #{name := Name}) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    [filename:join(Dir, Name ++ kprof_opts:extension(F))
     || F <- formats(maps:get(output_format, Cfg))].

%% The frame flame_apply hides: kprof_flame_srv is told it when the capture
%% opens (it does not call back here).
-spec hidden_frame() -> mfa().
hidden_frame() ->
    {?MODULE, traced, 2}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-type mfa_args() :: {module(), atom(), [term()]}.

-spec run_apply(fun(() -> term()) | mfa_args(), map()) ->
          {ok, term(), [file:filename()]} | {error, term()}.
%% What flame_apply runs, the caller's label when it has no initial call of
%% its own to show (kprof_flame_srv:call_of/1).
-spec runs(fun() | {module(), atom(), [term()]}) -> mfa().
runs({M, F, Args}) ->
    {M, F, length(Args)};
runs(Fun) ->
    {module, M} = erlang:fun_info(Fun, module),
    {name, F} = erlang:fun_info(Fun, name),
    {arity, A} = erlang:fun_info(Fun, arity),
    {M, F, A}.

run_apply(What, Cfg) ->
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, apply, Cfg#{pids => [self()], hide => hidden_frame(),
                                              runs => runs(What)}) of
        {ok, Flags} ->
            {Outcome, End} = traced(What, Flags),
            Written = finish(Id, End, Cfg, apply, Flags),
            case {Outcome, aborted(Id, 0)} of
                {{ok, Result}, {aborted, Kind}} ->
                    {error, {aborted, Kind, Result, files(Written)}};
                {{ok, Result}, false} ->
                    case Written of
                        {ok, Files} -> {ok, Result, Files};
                        Error -> Error
                    end;
                {{raise, Class, Reason, Stack}, _} ->
                    logger:notice("kprof flame_apply: the function raised ~p:~p; files: ~p",
                                  [Class, Reason, Written]),
                    erlang:raise(Class, Reason, Stack)
            end;
        Error ->
            Error
    end.

-spec run_pid([pid()], non_neg_integer(), map()) ->
          {ok, [file:filename()]} | {error, term()}.
run_pid(Pids, Ms, Cfg) ->
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, pid, Cfg#{pids => Pids}) of
        {ok, Flags} ->
            Aborted = aborted(Id, Ms),
            End = erlang:monotonic_time(nanosecond),
            Written = finish(Id, End, Cfg, pid, Flags),
            end_with(again(Id, Aborted), Written);
        Error ->
            Error
    end.

-spec run_capture(mfa(), pos_integer(), map()) ->
          {ok, [file:filename()]} | {error, term()}.
run_capture(MFA, N, Cfg) ->
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, capture, Cfg#{trigger => MFA, ncalls => N}) of
        {ok, Flags} ->
            Deadline = deadline(maps:get(timeout, Cfg)),
            case wait_calls(Id, N, Deadline, false) of
                Done when Done =:= done; element(1, Done) =:= aborted ->
                    End = erlang:monotonic_time(nanosecond),
                    Written = finish(Id, End, Cfg, capture, Flags),
                    end_with(again(Id, Done), Written);
                {error, _} = Error ->
                    _ = kprof_flame_srv:close(Id),
                    _ = kprof_sink:send({flame_drop, Id}),
                    _ = kprof_flame_srv:done(Id),
                    _ = again(Id, false),
                    Error
            end;
        Error ->
            Error
    end.

%% Tracing off, the files written, then the guard disarmed: an overload
%% while the sink still reads the capture's events aborts it too.
-spec finish(integer(), integer(), map(), apply | pid | capture, list()) ->
          {ok, [file:filename()]} | {error, term()}.
finish(Id, End, Cfg, Mode, Flags) ->
    _ = kprof_flame_srv:close(Id),
    Written = write(Id, End, Cfg, Mode, Flags),
    _ = kprof_flame_srv:done(Id),
    Written.

%% Polls the sink until N trigger calls have returned. Once N have started,
%% the trigger pattern comes off so no more processes get flags.
-spec wait_calls(integer(), pos_integer(), integer() | infinity, boolean()) ->
          done | {aborted, atom()} | {error, term()}.
wait_calls(Id, N, Deadline, Stopped) ->
    case kprof_sink:command({flame_status, Id}, ?STATUS_TIMEOUT) of
        #{calls_done := Done} when Done >= N ->
            done;
        #{calls_started := Started} = Status ->
            Stopped1 = Stopped orelse
                (Started >= N andalso kprof_flame_srv:stop_trigger(Id) =:= ok),
            case past(Deadline) of
                true ->
                    logger:warning("kprof flame_capture: timeout with ~b of ~b calls started "
                                   "and ~b done; nothing written",
                                   [Started, N, maps:get(calls_done, Status)]),
                    {error, timeout};
                false ->
                    case aborted(Id, ?POLL_MS) of
                        false -> wait_calls(Id, N, Deadline, Stopped1);
                        Aborted -> Aborted
                    end
            end;
        {error, _} = Error ->
            %% A sink that does not answer: the guard sees it too (its ring
            %% stands still) and aborts; the capture then ends with its files.
            case aborted(Id, 0) of
                false -> sink_error(Error);
                Aborted -> Aborted
            end;
        Other ->
            {error, {sink, Other}}
    end.

-spec sink_error({error, term()}) -> {error, term()}.
sink_error({error, {sink, _}} = E) -> E;
sink_error({error, Reason}) -> {error, {sink, Reason}}.

%% The guard stopped the tracing (overload or a limit) within Ms?
-spec aborted(integer(), non_neg_integer()) -> {aborted, atom()} | false.
aborted(Id, Ms) ->
    receive
        {kprof_flame_aborted, Id, Kind} ->
            logger:warning("kprof flame: the guard stopped the capture (~p); the files show "
                           "what came before", [Kind]),
            {aborted, Kind}
    after Ms ->
            false
    end.

%% After the guard is disarmed (done): an abort it sent before is in the mailbox.
-spec again(integer(), done | false | {aborted, atom()}) -> done | false | {aborted, atom()}.
again(Id, Outcome) when Outcome =:= done; Outcome =:= false ->
    case aborted(Id, 0) of
        false -> Outcome;
        Aborted -> Aborted
    end;
again(_Id, Aborted) ->
    Aborted.

-spec end_with(done | false | {aborted, atom()}, {ok, [file:filename()]} | {error, term()}) ->
          {ok, [file:filename()]} | {error, term()}.
end_with({aborted, Kind}, Written) -> {error, {aborted, Kind, files(Written)}};
end_with(_, Written) -> Written.

-spec files({ok, [file:filename()]} | {error, term()}) -> [file:filename()].
files({ok, Files}) -> Files;
files({error, Reason}) ->
    %% Aborted and then not written either: the list is empty, the reason said.
    logger:warning(#{what => kprof_flame_not_written, reason => Reason},
                   #{report_cb => fun(#{reason := R}) ->
                                          {"kprof flame: the aborted capture's files could not "
                                           "be written: ~p", [R]}
                                  end}),
    [].

-spec deadline(timeout()) -> integer() | infinity.
deadline(infinity) -> infinity;
deadline(Ms) -> erlang:monotonic_time(millisecond) + Ms.

-spec past(integer() | infinity) -> boolean().
past(infinity) -> false;
past(Deadline) -> erlang:monotonic_time(millisecond) >= Deadline.

%% Every event the tracer NIF wrote is in the ring before the command, and
%% the sink reads the ring before every command. Through a port, every trace
%% message sent so far is in the port's queue first (trace_delivered). The
%% sink then has ?WRITE_TIMEOUT to answer; one that does not is killed and
%% restarted (the capture is lost with it, and the error says so).
-spec write(integer(), integer(), map(), apply | pid | capture, list()) ->
          {ok, [file:filename()]} | {error, term()}.
write(Id, End, Cfg, Mode, Flags) ->
    _ = lists:member({tracer, kprof_sink:port()}, Flags) andalso delivered(),
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    Base = maps:get(name, Cfg, base_name(Mode, Id)),
    Formats = formats(maps:get(output_format, Cfg)),
    _ = (Mode =:= capture orelse maps:get(children, Cfg)) andalso
        kprof_flame_srv:label_members(Id),
    Cmd = {flame_write, Id, End, unicode:characters_to_binary(Dir),
           unicode:characters_to_binary(Base), Formats},
    case filelib:ensure_path(Dir) of
        ok ->
            case kprof_sink:command(Cmd, ?WRITE_TIMEOUT) of
                {ok, Paths, Info} ->
                    Files = [unicode:characters_to_list(P) || P <- Paths],
                    %% Routine: debug, so that a shell (Elixir's default level is
                    %% info) shows the files returned, not a report of them.
                    logger:debug(#{what => kprof_flame_written, id => Id, files => Files,
                                  info => Info}),
                    warn_limits(Info),
                    maybe_open(maps:get(open, Cfg), Files),
                    {ok, Files};
                {error, no_events, _Info} ->
                    logger:warning("kprof flame: no events, no files written. ~ts",
                                   [hint(Mode)]),
                    {error, no_events};
                {error, timeout} ->
                    _ = kprof_sink:restart({flame_write_timeout, Id, ?WRITE_TIMEOUT}),
                    {error, {sink, {no_answer_ms, ?WRITE_TIMEOUT}}};
                {error, _} = Error ->
                    Error;
                Other ->
                    {error, {sink, Other}}
            end;
        {error, Reason} ->
            _ = kprof_sink:send({flame_drop, Id}),
            {error, {output_directory, Dir, Reason}}
    end.

%% The port's trace messages all handed to it, or ?WRITE_TIMEOUT gone by.
-spec delivered() -> ok.
delivered() ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after ?WRITE_TIMEOUT -> ok end.

-spec hint(apply | pid | capture) -> string().
hint(apply) ->
    "The function made no call the VM could trace (BIFs of modules loaded after "
    "the capture started are not traced), or returned at once.";
hint(pid) ->
    "The processes were not scheduled in during the capture (idle in a receive): "
    "trace them for longer, or while they work.";
hint(capture) ->
    "The trigger calls made no traceable call and took no time.".

%% Limits that changed the picture are said, not hidden.
-spec warn_limits(map()) -> ok.
warn_limits(Info) ->
    Said = [{depth_capped, "frames deeper than max_depth were merged into TRUNCATED"},
            {dropped_nodes, "call paths beyond max_nodes were credited to their parents"},
            {stack_overflow, "frames beyond the per-process stack limit were only counted"},
            {dropped_procs, "processes beyond the capture's limit were left out"}],
    _ = [logger:notice("kprof flame: ~s (~b times)", [Text, N])
         || {K, Text} <- Said, (N = maps:get(K, Info, 0)) > 0],
    ok.

%% @private `open => speedscope': runs `speedscope File.speedscope.json' in a
%% process of its own (never blocks the caller, and its failure is only
%% logged); without the CLI on the PATH, a warning says how to get it. The
%% files are there either way.
-spec maybe_open(speedscope | false, [file:filename()]) -> ok.
maybe_open(speedscope, Files) ->
    case [F || F <- Files, lists:suffix(".speedscope.json", F)] of
        [] ->
            logger:warning("kprof flame: open => speedscope needs the speedscope "
                           "output_format; files: ~p", [Files]);
        [File | _] ->
            case os:find_executable("speedscope") of
                false ->
                    logger:warning("kprof flame: open => speedscope: the speedscope CLI is "
                                   "not on the PATH (install it with `npm install -g "
                                   "speedscope`), or load ~ts at https://www.speedscope.app",
                                   [File]);
                Exe ->
                    _ = spawn(fun() -> run_detached(Exe, File) end),
                    ok
            end
    end,
    ok;
maybe_open(false, _Files) ->
    ok.

-spec run_detached(file:filename(), file:filename()) -> ok.
run_detached(Exe, File) ->
    try open_port({spawn_executable, Exe}, [{args, [File]}, exit_status, stderr_to_stdout]) of
        Port -> drain(Port)
    catch
        error:Reason ->
            logger:warning("kprof flame: could not run ~ts: ~p", [Exe, Reason])
    end.

-spec drain(port()) -> ok.
drain(Port) ->
    receive
        {Port, {exit_status, _}} -> ok;
        {Port, _} -> drain(Port)
    after 60000 -> ok
    end.

-spec base_name(apply | pid | capture, integer()) -> string().
base_name(Mode, Id) ->
    {{Y, Mo, D}, {H, Mi, S}} = calendar:local_time(),
    lists:flatten(io_lib:format("kprof-~s-~4..0b~2..0b~2..0b-~2..0b~2..0b~2..0b-~b",
                                [Mode, Y, Mo, D, H, Mi, S, Id])).

%% @private
-spec formats(format() | [format()] | all) -> [format()].
formats(all) -> kprof_opts:formats();
formats(F) when is_atom(F) -> [F];
formats(Fs) -> lists:usort(Fs).

-spec with_sink(fun(() -> Result)) -> Result | {error, term()}.
with_sink(Fun) ->
    case kprof_app:ensure_started() of
        ok -> Fun();
        Error -> Error
    end.

-spec untrace_self() -> ok.
untrace_self() ->
    _ = erlang:trace(self(), false, kprof_flame_srv:untrace_flags()),
    ok.

-spec is_runnable(term()) -> boolean().
is_runnable(F) when is_function(F, 0) -> true;
is_runnable({M, F, A}) -> is_atom(M) andalso is_atom(F) andalso is_list(A);
is_runnable(_) -> false.

-spec function_exists(mfa()) -> boolean().
function_exists({M, F, A}) ->
    case code:ensure_loaded(M) of
        {module, M} -> lists:member({F, A}, M:module_info(functions));
        _ -> false
    end.

-spec cap_millis(non_neg_integer()) -> non_neg_integer().
cap_millis(Ms) when Ms > ?MAX_PID_MS ->
    logger:notice("kprof flame_pid: ~b ms is over the limit; tracing for ~b ms", [Ms, ?MAX_PID_MS]),
    ?MAX_PID_MS;
cap_millis(Ms) ->
    Ms.

%%% VALIDATION

