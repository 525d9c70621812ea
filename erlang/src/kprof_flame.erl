%%% @doc Flame graphs of real calls, made off-node: the VM sends call,
%%% return_to, scheduling, process and GC events to the sink, which turns
%%% them into call stacks, adds up the time of every stack and writes the
%%% files itself. `kprof:flame_apply/2', `kprof:flame_capture/3' and
%%% `kprof:flame_pid/3' are the user's entry points (doc/flame.md).
%%%
%%% ```
%%%  flame_apply(Fun)      the caller and what it spawns, from just before
%%%                        Fun() to its return
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
%%%
%%% By default the call pattern has no match spec (the VM's cheapest call
%%% event) and the sink builds stacks from calls and return_tos, learning
%%% which calls are tail calls; `callers => true' asks every call's caller
%%% for the BEAM's own stacks, at about twice the VM's cost per call. Times
%%% are corrected for tracing's cost per event (`correct', measured by
%%% {@link kprof_flame_calib}); the call-path tree has a budget in bytes
%%% (`max_bytes'), paths past it in an `OVER_BUDGET' frame whose share is
%%% printed ({@link kprof_flame_summary}); the top table is exact either way.
%%% Nothing but commands and the list of files crosses back into Erlang.
-module(kprof_flame).

%% PUBLIC (through kprof)
-export([apply/2, capture/3, pid/3, validate/2, planned_files/1]).
%% Internal: the frame flame_apply hides (traced/2, hidden_frame/0: the
%% calibration runs captures of its own); open => speedscope and the list of
%% formats (kprof_tiers_full too).
-export([traced/2, hidden_frame/0, maybe_open/2, formats/1, paths/2, out_dir/1]).
%% Internal: a capture's result from the sink's answer (kprof_record's replay too).
-export([result/3]).
%% Internal: a progress line, for its test.
-export([progress_text/3]).
-export([last_written/0]).

-export_type([opts/0, format/0, written/0]).

-type format() :: folded | perf | speedscope | svg | callgrind.
%% The files written, and with `top => N' the table of kprof_top, or with
%% `info => true' the capture's summary (kprof_flame_summary, the table in it).
-type written() :: {ok, [file:filename_all()]} | {ok, [file:filename_all()], [kprof_top:row()]}
                 | {ok, [file:filename_all()], kprof_flame_summary:summary()}.
-type opts() ::
        #{output_format => format() | [format()] | all,  % default: all five
          output_directory => file:filename(),          % default: the cwd
          name => string(),                % files' base name (default kprof-Mode-Time-Id)
          sleep => boolean(),              % SLEEP frames (default true)
          gc => boolean(),                 % GC frames (default true)
          children => boolean(),           % follow spawned processes (default: true for
                                           % flame_apply, false for flame_pid and flame_capture)
          max_bytes => pos_integer(),      % the call-path tree's memory (default 2 GiB):
                                           % paths past it go to OVER_BUDGET frames
          perf_period_us => non_neg_integer(), % perf sample period; 0: automatic
          max_procs => pos_integer(),      % processes in the capture (default 100,000)
          %% processes merged at the root, Key(N_processes): by registered name,
          %% initial call, or all in one (default initial_call with children, else pid)
          group => pid | name | initial_call | all,
          fold_recursion => boolean(),     % f;f;f written as one f (default false)
          timeout => timeout(),            % flame_capture's wait (default 30000 ms)
          open => speedscope | browser | false, % the speedscope CLI on the result, or
                                           % the SVG in $BROWSER or xdg-open
          progress => boolean() | pos_integer(), % a line every 5000 ms (or Ms) while
                                           % the capture runs (default true)
          names => erlang | elixir,        % how functions are named in the text
          callers => boolean(),            % {caller} on every call: the BEAM's own
                                           % stacks, at a higher cost (default false)
          correct => boolean(),            % take tracing's cost per event off the
                                           % times (default true; kprof_flame_calib)
          top => non_neg_integer(),        % print and return the N functions with the
                                           % most self time (default 0: none)
          info => boolean(),               % return the capture's summary (default false)
          record => file:filename_all(),   % also write the event stream to this file
          max_record_bytes => pos_integer(), % a record file's bound (default 1 GiB)
          record_rotate => non_neg_integer(), % past it: 0 stops, N rotates (kprof_record)
          %% kprof_guard's limits (max_lag_ms, max_queue_bytes, max_memory_bytes,
          %% max_events, rate, max_seconds): past one, tracing stops and the
          %% capture ends with {error, {aborted, Kind, Files}}.
          atom() => term()}.

-define(DEFAULT_PID_MS, 3000).
-define(MAX_PID_MS, 60000).
-define(POLL_MS, 10).
%% The first progress line, and the next ones, this often (option progress).
-define(PROGRESS_MS, 5000).
%% How long a progress line waits for the sink's counts (at most).
-define(PROGRESS_WAIT, 1000).
%% Waiting for the sink to read the capture's events and write the files
%% (a second or two for the largest captures), and for a flame_status.
-define(WRITE_TIMEOUT, 30000).
-define(STATUS_TIMEOUT, 5000).
%% The calling process's last capture (last_written/0).
-define(LAST_WRITTEN, {?MODULE, last_written}).
-define(GUARD_KEYS, kprof_guard:limit_keys()).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Run `Fun()' or `apply(M, F, Args)' traced in the calling process.
-spec apply(fun(() -> term()) | {module(), atom(), [term()]}, opts()) ->
          {ok, term(), [file:filename_all()]}
          | {ok, term(), [file:filename_all()], [kprof_top:row()] | kprof_flame_summary:summary()}
          | {error, term()}.
apply(What, Opts) ->
    case {is_runnable(What), validate(Opts, apply)} of
        {false, _} -> {error, {bad_fun, What}};
        {true, {ok, Cfg}} -> with_sink(fun() -> with_dir(Cfg, fun() -> run_apply(What, Cfg) end) end);
        {true, Error} -> Error
    end.

%% @doc Trace the next `N' calls of `{M, F, Arity}' in whatever processes
%% make them.
-spec capture(mfa(), pos_integer(), opts()) -> written() | {error, term()}.
capture({M, F, A} = MFA, N, Opts)
  when is_atom(M), is_atom(F), is_integer(A), A >= 0, A =< 255, is_integer(N), N > 0 ->
    case validate(Opts, capture) of
        {ok, Cfg} ->
            case function_exists(MFA) of
                true -> with_sink(fun() -> with_dir(Cfg, fun() -> run_capture(MFA, N, Cfg) end) end);
                false -> {error, {no_such_function, MFA}}
            end;
        Error ->
            Error
    end;
capture(MFA, N, _Opts) ->
    {error, {badarg, {MFA, N}}}.

%% @doc Trace running processes for `Millis' ms (at most 60 s).
-spec pid(pid() | [pid()], non_neg_integer() | default, opts()) ->
          written() | {error, term()}.
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
                Alive -> with_sink(fun() -> with_dir(Cfg, fun() -> run_pid(Alive, Ms, Cfg) end) end)
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
validate(Opts, Mode) ->
    %% Keys, values and defaults: the option table's (kprof_opts).
    case kprof_opts:check(flame, kprof_record:to_check(Opts)) of
        {ok, Checked} ->
            Cfg0 = maps:without(?GUARD_KEYS, Checked#{children => children(Mode, Opts, Checked)}),
            Cfg = kprof_record:check(Cfg0, Opts),
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

%% flame_apply follows the processes its call spawns unless told not to, as
%% eprof, fprof and tprof do: a call's work is also what it hands to the
%% processes it starts (compile:file compiles in one), and leaving them out
%% would show the caller waiting with nothing to say why (doc/flame.md,
%% "What a call spawns"). flame_pid and flame_capture keep the table's
%% default (false).
-spec children(apply | pid | capture, map(), map()) -> boolean().
children(apply, Opts, _Checked) when not is_map_key(children, Opts) -> true;
children(_Mode, _Opts, #{children := Children}) -> Children.

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

%% @doc The last capture that wrote files from this process (flame_apply,
%% flame_capture, flame_pid): its id, its files and the sink's counts
%% (`events', `write_us' per format, `dropped_procs', `lost_frames', `top',
%% ...); `undefined' before the first. A routine capture logs nothing: these
%% are there to read when wanted.
-spec last_written() -> #{id := integer(), files := [file:filename_all()], info := map()}
                            | undefined.
last_written() ->
    get(?LAST_WRITTEN).

%% @doc The files a capture with these (validated) options will write when
%% nothing is in the way (an existing file makes the sink add `-1', `-2',
%% ... to the base name): for callers that must say where before the end.
-spec planned_files(map()) -> [file:filename_all()].
planned_files(Cfg = #{name := Name}) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    [filename:join(Dir, kprof_opts:file_name(F, Name))
     || F <- formats(maps:get(output_format, Cfg))].

%% @private The frame flame_apply hides: kprof_flame_srv is told it when the
%% capture opens (it does not call back here).
-spec hidden_frame() -> mfa().
hidden_frame() ->
    {?MODULE, traced, 2}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-type mfa_args() :: {module(), atom(), [term()]}.

%% What flame_apply runs, the caller's label when it has no initial call of
%% its own to show (kprof_flame_labels:call_of/1).
-spec runs(fun() | {module(), atom(), [term()]}) -> mfa().
runs({M, F, Args}) ->
    {M, F, length(Args)};
runs(Fun) ->
    {module, M} = erlang:fun_info(Fun, module),
    {name, F} = erlang:fun_info(Fun, name),
    {arity, A} = erlang:fun_info(Fun, arity),
    {M, F, A}.

-spec run_apply(fun(() -> term()) | mfa_args(), map()) ->
          {ok, term(), [file:filename_all()]}
          | {ok, term(), [file:filename_all()], [kprof_top:row()] | kprof_flame_summary:summary()}
          | {error, term()}.
run_apply(What, Cfg0) ->
    Cfg = with_correction(Cfg0),
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, apply, Cfg#{pids => [self()], hide => hidden_frame(),
                                              runs => runs(What)}) of
        {ok, Flags} ->
            Progress = progress_start(Id, apply, Cfg),
            {Outcome, End} = traced(What, Flags),
            progress_stop(Progress),
            Written = finish(Id, end_time(Id, End), Cfg, apply, Flags),
            case {Outcome, aborted(Id, 0)} of
                {{ok, Result}, {aborted, Kind}} ->
                    {error, {aborted, Kind, Result, files(Written)}};
                {{ok, Result}, false} ->
                    case Written of
                        {ok, Files} -> {ok, Result, Files};
                        {ok, Files, More} -> {ok, Result, Files, More};
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
          written() | {error, term()}.
run_pid(Pids, Ms, Cfg0) ->
    Cfg = with_correction(Cfg0),
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, pid, Cfg#{pids => Pids}) of
        {ok, Flags} ->
            Progress = progress_start(Id, {pid, Ms}, Cfg),
            Aborted = aborted(Id, Ms),
            progress_stop(Progress),
            End = end_time(Id, erlang:monotonic_time(nanosecond)),
            Written = finish(Id, End, Cfg, pid, Flags),
            end_with(again(Id, Aborted), Written);
        Error ->
            Error
    end.

-spec run_capture(mfa(), pos_integer(), map()) ->
          written() | {error, term()}.
run_capture(MFA, N, Cfg0) ->
    Cfg = with_correction(Cfg0),
    Id = erlang:unique_integer([positive]),
    case kprof_flame_srv:open(Id, capture, Cfg#{trigger => MFA, ncalls => N}) of
        {ok, Flags} ->
            Deadline = deadline(maps:get(timeout, Cfg)),
            Progress = progress_start(Id, {capture, N}, Cfg),
            Waited = wait_calls(Id, N, Deadline, false),
            progress_stop(Progress),
            case Waited of
                Done when Done =:= done; element(1, Done) =:= aborted ->
                    End = end_time(Id, erlang:monotonic_time(nanosecond)),
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

%% The cost per event the sink takes off (correct => true, the default):
%% measured on this machine at the first capture (kprof_flame_calib).
-spec with_correction(map()) -> map().
with_correction(Cfg) ->
    Cfg#{correct_ns => kprof_flame_calib:cost(Cfg)}.

%% Tracing off, the files written, then the guard disarmed: an overload
%% while the sink still reads the capture's events aborts it too.
-spec finish(integer(), integer(), map(), apply | pid | capture, list()) ->
          written() | {error, term()}.
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
        {kprof_flame_aborted, Id, cancelled} ->
            logger:notice("kprof flame: kprof:cancel() ended the capture; the files show "
                          "what came before"),
            {aborted, cancelled};
        {kprof_flame_aborted, Id, Kind} ->
            logger:warning("kprof flame: the guard stopped the capture (~p); the files show "
                           "what came before", [Kind]),
            {aborted, Kind}
    after Ms ->
            false
    end.

%% When the capture's tracing stopped: kprof:cancel() says when it took it
%% off (a flame_apply's function may have run on untraced), else Default.
-spec end_time(integer(), integer()) -> integer().
end_time(Id, Default) ->
    receive
        {kprof_flame_end, Id, End} -> min(End, Default)
    after 0 ->
            Default
    end.

%% Progress while a capture runs: after `progress' ms (default 5000), and as
%% often again, a line to the caller's group leader with the time so far,
%% the trigger calls started and done (flame_capture) and the events so far
%% (the sink's flame_status); `progress => false': none. A process of its
%% own: the caller may be inside the traced function or waiting.
-spec progress_start(integer(), apply | {pid, non_neg_integer()} | {capture, pos_integer()},
                     map()) -> undefined | {pid(), reference()}.
progress_start(Id, Mode, Cfg) ->
    case maps:get(progress, Cfg, ?PROGRESS_MS) of
        false ->
            undefined;
        Every ->
            Ms = case Every of true -> ?PROGRESS_MS; _ -> Every end,
            GL = group_leader(),
            Owner = self(),
            T0 = erlang:monotonic_time(millisecond),
            spawn_monitor(fun() ->
                                  %% Gone with its caller (killed mid-capture).
                                  _ = erlang:monitor(process, Owner),
                                  progress_loop(Id, Mode, GL, T0, Ms)
                          end)
    end.

-spec progress_stop(undefined | {pid(), reference()}) -> ok.
progress_stop(undefined) ->
    ok;
progress_stop({Pid, MRef}) ->
    %% Killed, not asked: it may be waiting for the sink's answer. Gone
    %% before the capture returns, so no line comes after its result.
    exit(Pid, kill),
    receive {'DOWN', MRef, process, Pid, _} -> ok end.

-spec progress_loop(integer(), apply | {pid, non_neg_integer()} | {capture, pos_integer()},
                    pid(), integer(), pos_integer()) -> ok.
progress_loop(Id, Mode, GL, T0, Ms) ->
    receive
        {'DOWN', _, process, _, _} -> ok
    after Ms ->
            %% A sink behind a port tracer's backlog answers late: the line
            %% says so rather than wait, and nosuspend, as the guard's
            %% watchers do: a plain command to a busy port would suspend
            %% kprof_sink itself, and every command behind it (the write,
            %% a restart) would wait for the backlog to drain.
            Status = case kprof_sink:command({flame_status, Id}, min(Ms, ?PROGRESS_WAIT),
                                             [nosuspend]) of
                         S when is_map(S) -> S;
                         _ -> behind
                     end,
            Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
            %% A group leader gone (its shell ended) ends the lines, quietly.
            try io:format(GL, "~ts~n", [progress_text(Mode, Secs, Status)]) of
                ok -> progress_loop(Id, Mode, GL, T0, Ms)
            catch
                _:_ -> ok
            end
    end.

%% @private One progress line.
-spec progress_text(apply | {pid, non_neg_integer()} | {capture, pos_integer()},
                    float(), map() | behind) -> string().
progress_text(Mode, Secs, Status) ->
    Get = fun(K) when is_map(Status) -> maps:get(K, Status, 0); (_) -> 0 end,
    What = case Mode of
               apply ->
                   io_lib:format("flame_apply: ~.1f s", [Secs]);
               {pid, Ms} ->
                   io_lib:format("flame_pid: ~.1f s of ~.1f s", [Secs, Ms / 1000]);
               {capture, N} when is_map(Status) ->
                   io_lib:format("flame_capture: ~.1f s, ~b of ~b calls started, ~b done",
                                 [Secs, Get(calls_started), N, Get(calls_done)]);
               {capture, N} ->
                   io_lib:format("flame_capture: ~.1f s, ~b calls asked for", [Secs, N])
           end,
    Events = case Status of
                 behind -> "events not counted yet (the sink is behind)";
                 _ -> io_lib:format("~b events so far", [Get(events)])
             end,
    lists:flatten(io_lib:format("kprof ~ts, ~ts (kprof:cancel() ends it with its files)",
                                [What, Events])).

%% After the guard is disarmed (done): an abort it sent before is in the mailbox.
-spec again(integer(), done | false | {aborted, atom()}) -> done | false | {aborted, atom()}.
again(Id, Outcome) when Outcome =:= done; Outcome =:= false ->
    case aborted(Id, 0) of
        false -> Outcome;
        Aborted -> Aborted
    end;
again(_Id, Aborted) ->
    Aborted.

-spec end_with(done | false | {aborted, atom()}, written() | {error, term()}) ->
          written() | {error, term()}.
end_with({aborted, Kind}, Written) -> {error, {aborted, Kind, files(Written)}};
end_with(_, Written) -> Written.

-spec files(written() | {error, term()}) -> [file:filename_all()].
files({ok, Files}) -> Files;
files({ok, Files, _More}) -> Files;
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
          written() | {error, term()}.
write(Id, End, Cfg, Mode, Flags) ->
    _ = lists:member({tracer, kprof_sink:port()}, Flags) andalso delivered(),
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    Base = maps:get(name, Cfg, base_name(Mode, Id)),
    Formats = formats(maps:get(output_format, Cfg)),
    _ = (Mode =:= capture orelse maps:get(children, Cfg)) andalso
        kprof_flame_labels:label_members(Id),
    Cmd = {flame_write, Id, End, unicode:characters_to_binary(Dir),
           unicode:characters_to_binary(Base), Formats},
    %% The sink makes the directory and checks it again (flame_dir at the start).
    case Formats =:= [] orelse kprof_sink:command(Cmd, ?WRITE_TIMEOUT) of
        true ->
            kprof_record:write_only(Id, Cfg);
        {ok, Paths, Info} ->
            Files = paths(Paths, Cfg) ++ kprof_record:files(Info, Cfg),
            %% Routine: no log line (IEx shows every level, debug
            %% included, by default); the counts for last_written/0.
            _ = put(?LAST_WRITTEN, #{id => Id, files => Files, info => Info}),
            warn_limits(Info),
            maybe_open(maps:get(open, Cfg), Files),
            result(Files, Info, Cfg);
        {error, no_events, _Info} ->
            logger:warning("kprof flame: no events, no files written. ~ts",
                           [hint(Mode)]),
            {error, no_events};
        {error, timeout} ->
            _ = kprof_sink:restart({flame_write_timeout, Id, ?WRITE_TIMEOUT}),
            {error, {sink, {no_answer_ms, ?WRITE_TIMEOUT}}};
        {error, {unsafe_directory, _, _} = Reason} ->
            {error, {output_directory, Dir, dir_reason(Reason, Cfg)}};
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.

%% @private The sink's paths (UTF-8 binaries) as the caller gave the
%% directory: binaries for a binary `output_directory' (Elixir's strings),
%% else strings.
-spec paths([binary()], map()) -> [file:filename_all()].
paths(Paths, Cfg) ->
    case is_binary(maps:get(output_directory, Cfg, ".")) of
        true -> Paths;
        false -> [unicode:characters_to_list(P) || P <- Paths]
    end.

%% @private What limits cut from the graph is printed when anything was (the
%% summary); `top => N': the sink's table of the functions with the most
%% self time, printed to the caller's group leader and returned after the
%% files; `info => true': the summary (the table in it) returned instead.
-spec result([file:filename_all()], map(), map()) -> written().
result(Files, Info, Cfg) ->
    Rows = case Info of
               #{top := Raw, total_us := Total, functions := _} -> kprof_top:rows(Raw, Total);
               _ -> []
           end,
    Summary = kprof_flame_summary:from_info(Info, Rows),
    _ = maps:is_key(top, Info) andalso
        begin
            kprof_top:print(Rows, Info#{names => maps:get(names, Cfg, erlang)}),
            io:put_chars(kprof_flame_summary:correction_text(Summary))
        end,
    kprof_flame_summary:print(Summary),
    case maps:get(calls_uncounted, Info, 0) of
        0 -> ok;
        N -> logger:warning("kprof flame: ~b calls could not be counted in the top table "
                            "(the sink was out of memory)", [N])
    end,
    case Cfg of
        #{info := true} -> {ok, Files, Summary};
        #{top := Top} when Top > 0 -> {ok, Files, Rows};
        _ -> {ok, Files}
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
    Said = [{dropped_procs, "processes beyond the capture's limit were left out"}],
    _ = [logger:notice("kprof flame: ~s (~b times)", [Text, N])
         || {K, Text} <- Said, (N = maps:get(K, Info, 0)) > 0],
    ok.

%% @private `open => speedscope': runs `speedscope File.speedscope.json' in a
%% process of its own (never blocks the caller, and its failure is only
%% logged); without the CLI on the PATH, a warning says how to get it. The
%% files are there either way.
-spec maybe_open(speedscope | browser | false, [file:filename_all()]) -> ok.
maybe_open(speedscope, Files) ->
    open_with(speedscope, ".speedscope.json", executable("speedscope"), Files,
              "the speedscope CLI is not on the PATH (install it with `npm install -g "
              "speedscope`), or load ~ts at https://www.speedscope.app");
maybe_open(browser, Files) ->
    open_with(browser, ".svg", browser(), Files,
              "neither $BROWSER nor xdg-open is there to open ~ts");
maybe_open(false, _Files) ->
    ok.

%% The file of the format's extension run through Exe in a process of its
%% own; without one of those files, or without Exe, a warning says which.
-spec open_with(speedscope | browser, string(), file:filename() | false,
                [file:filename_all()], string()) -> ok.
open_with(How, Ext, Exe, Files0, Missing) ->
    Files = [unicode:characters_to_list(F) || F <- Files0],
    case {[F || F <- Files, lists:suffix(Ext, F)], Exe} of
        {[], _} ->
            logger:warning("kprof flame: open => ~s needs the ~s output_format; files: ~p",
                           [How, format_of(How), Files]);
        {[File | _], false} ->
            logger:warning("kprof flame: open => ~s: " ++ Missing, [How, File]);
        {[File | _], _} ->
            _ = spawn(fun() -> run_detached(Exe, File) end),
            ok
    end,
    ok.

-spec format_of(speedscope | browser) -> speedscope | svg.
format_of(speedscope) -> speedscope;
format_of(browser) -> svg.

%% $BROWSER (a command, or the first of a colon-separated list, as
%% xdg-utils read it), else xdg-open.
-spec browser() -> file:filename() | false.
browser() ->
    case os:getenv("BROWSER") of
        Set when is_list(Set), Set =/= "" ->
            [First | _] = string:split(Set, ":"),
            case executable(First) of
                false -> browser_default();
                Exe -> Exe
            end;
        _ ->
            browser_default()
    end.

-spec browser_default() -> file:filename() | false.
browser_default() ->
    executable("xdg-open").

%% A command's absolute path: the name itself when absolute, else from the
%% PATH's absolute directories only (a relative one, `.' say, would run
%% whatever the node's current directory holds).
-spec executable(string()) -> file:filename() | false.
executable(Name) ->
    case filename:pathtype(Name) of
        absolute ->
            os:find_executable(filename:basename(Name), filename:dirname(Name));
        _ ->
            Dirs = [D || D <- string:lexemes(os:getenv("PATH", ""), ":"),
                         filename:pathtype(D) =:= absolute],
            os:find_executable(Name, lists:flatten(lists:join(":", Dirs)))
    end.

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

%% @private The capture's directory, made (0700) and checked by the sink
%% before anything is traced (port/core/out_dir.c: ours, not a symlink,
%% nobody else may write to it): `{error, {output_directory, Dir, Reason}}'
%% says why not, `Reason' being `{unsafe_directory, Path, Why}' (`Why':
%% `symlink', `not_directory', `{owner, Uid}', `{writable, Mode}') or
%% `{open_failed, Path, Errno}', `Path' the part of `Dir' at fault.
-spec out_dir(map()) -> ok | {error, term()}.
out_dir(Cfg) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    case kprof_sink:command({flame_dir, unicode:characters_to_binary(Dir)}) of
        ok -> ok;
        {error, {Kind, _Path, _Why} = Reason} when Kind =:= unsafe_directory;
                                                  Kind =:= open_failed ->
            {error, {output_directory, Dir, dir_reason(Reason, Cfg)}};
        %% Not answered, as every other capture's start says it: {sink, Why}.
        {error, Why} when Why =:= timeout; Why =:= not_running -> {error, {sink, Why}};
        {error, {sink_down, _} = Why} -> {error, {sink, Why}};
        {error, _} = Error -> Error;
        Other -> {error, {sink, Other}}
    end.

%% The sink's reason, its path as the caller gave the directory.
-spec dir_reason({atom(), binary(), term()}, map()) -> {atom(), file:filename_all(), term()}.
dir_reason({Kind, Path, Why}, Cfg) ->
    [P] = paths([Path], Cfg),
    {Kind, P, Why}.

-spec with_dir(map(), fun(() -> Result)) -> Result | {error, term()}.
with_dir(Cfg, Fun) ->
    case out_dir(Cfg) of
        ok -> Fun();
        Error -> Error
    end.

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

