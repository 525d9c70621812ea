%%% @doc Records trace streams written by the real VM, for the C tests.
%%%
%%% Each scenario opens a recording port,
%%% `open_port({spawn, "cat > NAME.bin"}, [binary, {packet,4}, exit_status])',
%%% traces real code with `{tracer, RecPort}' (the VM's `erl_tracer' writes
%%% one `term_to_binary' frame per event, exactly as it does to the sink),
%%% stops tracing, closes the port, waits for `cat' to exit, then reads the
%%% file back and writes `NAME.txt': one line per frame,
%%% `KIND PID MFA TS LABEL OTHER CALLER', `-' where absent (the format is
%%% described in test/data/README.md and in {@link line/1}).
%%%
%%% Run with `make recordings', or
%%% ```
%%% erl -noshell -pa _build/record -s kprof_trace_recorder main test/data [SCENARIO...]
%%% '''
-module(kprof_trace_recorder).

%% PUBLIC
-export([main/1, scenarios/0, record/3, expectations/1, line/1]).

-define(WORK, kprof_rec_work).
-define(UNICODE_MOD, 'kprof_rec_ünïcödé').
-define(TIMEOUT, 10000).
-define(MAX_FILE, 200 * 1024).

-type scenario() :: fun((port()) -> ok).

%% The worker of procs_running/1 ends with exit/1, on purpose.
-dialyzer({nowarn_function, procs_running/1}).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Record every scenario (or those named after the directory) into
%% `OutDir', then halt: 0 when all went well.
-spec main([string() | atom()]) -> no_return().
main([Dir | Names]) ->
    Wanted = [to_string(N) || N <- Names],
    Todo = [S || S = {Name, _} <- scenarios(), Wanted =:= [] orelse lists:member(Name, Wanted)],
    Results = [record(to_string(Dir), Name, Fun) || {Name, Fun} <- Todo],
    io:format("OTP ~s, ~b recording(s) in ~s~n",
              [erlang:system_info(otp_release), length(Results), to_string(Dir)]),
    halt(case lists:all(fun(R) -> R =:= ok end, Results) of true -> 0; false -> 1 end);
main([]) ->
    io:format(standard_error, "usage: kprof_trace_recorder OUT_DIR [SCENARIO...]~n", []),
    halt(2).

%% @doc The scenarios, in the order they run.
-spec scenarios() -> [{string(), scenario()}].
scenarios() ->
    [{"calls_ts", fun calls_ts/1},
     {"args_wall", fun args_wall/1},
     {"args_strict", fun args_strict/1},
     {"args_plain", fun args_plain/1},
     {"tokens_seq", fun tokens_seq/1},
     {"tokens_caller", fun tokens_caller/1},
     {"tokens_both", fun tokens_both/1},
     {"tokens_payload", fun tokens_payload/1},
     {"procs_running", fun procs_running/1},
     {"gc_send_receive", fun gc_send_receive/1},
     {"ports", fun ports/1},
     {"seq_trace", fun seq_trace/1},
     {"unicode", fun unicode/1}].

%% @doc Run one scenario into `Dir/Name.bin' and write `Dir/Name.txt'.
-spec record(file:filename(), string(), scenario()) -> ok | {error, term()}.
record(Dir, Name, Scenario) ->
    Bin = filename:join(Dir, Name ++ ".bin"),
    Txt = filename:join(Dir, Name ++ ".txt"),
    ok = ensure_driver(),
    Port = open_port({spawn, "cat > '" ++ Bin ++ "'"}, [binary, {packet, 4}, exit_status]),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    try
        ok = Scenario(Port)
    after
        clear_all_tracing(),
        drain(Port),
        port_close(Port),
        wait_os_exit(OsPid)
    end,
    {ok, Data} = file:read_file(Bin),
    Lines = expectations(Data),
    ok = file:write_file(Txt, Lines),
    report(Name, Data, Lines).

%% @doc The expectation lines of a recorded stream.
-spec expectations(binary()) -> [binary()].
expectations(Data) ->
    [<<(line(binary_to_term(F)))/binary, "\n">> || F <- frames(Data)].

%% @doc One frame as `KIND PID MFA TS LABEL OTHER CALLER'.
-spec line(tuple()) -> binary().
line(Msg) ->
    Fields = [kind(Msg), pid(Msg), mfa(Msg), ts(Msg), label(Msg), other(Msg), caller(Msg)],
    iolist_to_binary(lists:join(" ", Fields)).

%%%%%%%%%%%%%%%%%
%%% SCENARIOS %%%
%%%%%%%%%%%%%%%%%

%% a. Nested, tail and recursive calls, an escaping and a caught
%% exception: call / return_from / exception_from / return_to.
-spec calls_ts(port()) -> ok.
calls_ts(Port) ->
    Flags = [call, arity, return_to, monotonic_timestamp],
    MatchSpec = [{'_', [], [{return_trace}, {exception_trace}]}],
    ok = trace_calls(Port, Flags, MatchSpec, fun ?WORK:run/0),
    trace_await(Port, Flags, MatchSpec).

%% b. Argument lists (small-int lists, big binaries), wall-clock stamps.
-spec args_wall(port()) -> ok.
args_wall(Port) ->
    trace_calls(Port, [call, timestamp], [{'_', [], [{return_trace}]}],
                fun() -> ?WORK:run_args(big_binary(20000)) end).

-spec args_strict(port()) -> ok.
args_strict(Port) ->
    trace_calls(Port, [call, strict_monotonic_timestamp], [{'_', [], [{return_trace}]}],
                fun() -> ?WORK:run_args(big_binary(1000)) end).

-spec args_plain(port()) -> ok.
args_plain(Port) ->
    trace_calls(Port, [call], [{'_', [], [{return_trace}]}],
                fun() -> ?WORK:run_args(big_binary(100)) end).

%% c. Match-spec extras: seq_trace tokens, callers, both.
-spec tokens_seq(port()) -> ok.
tokens_seq(Port) ->
    tokens(Port, [{'_', [], [{message, {get_seq_token}}]}]).

-spec tokens_caller(port()) -> ok.
tokens_caller(Port) ->
    tokens(Port, [{'_', [], [{message, {caller}}]}]).

-spec tokens_both(port()) -> ok.
tokens_both(Port) ->
    tokens(Port, [{'_', [], [{message, {{{get_seq_token}, {caller}}}}]}]).

%% {Token, Caller, Payload}: what kprof's request markers produce.
-spec tokens_payload(port()) -> ok.
tokens_payload(Port) ->
    tokens(Port, [{'_', [], [{message, {{{get_seq_token}, {caller}, {const, {req, 42}}}}}]}]).

%% Calls with and without a label, then one whose caller is `undefined'
%% (a tail call from the first function of a process).
-spec tokens(port(), ets:match_spec()) -> ok.
tokens(Port, MatchSpec) ->
    Flags = [call, arity, monotonic_timestamp],
    ok = trace_calls(Port, Flags, MatchSpec, fun with_and_without_label/0),
    trace_await(Port, Flags, MatchSpec).

-spec with_and_without_label() -> tuple().
with_and_without_label() ->
    A = ?WORK:run_tokens(),
    _ = seq_trace:set_token(label, 5),
    B = ?WORK:run_tokens(),
    _ = seq_trace:set_token(label, 6),
    C = ?WORK:run_tokens(),
    %% Leave no token behind: it would travel with the `done' message.
    _ = seq_trace:set_token([]),
    D = ?WORK:run_tokens(),
    {A, B, C, D}.

%% d. Process events and scheduling, the traced process and its children.
-spec procs_running(port()) -> ok.
procs_running(Port) ->
    Flags = [procs, running, exiting, monotonic_timestamp, set_on_spawn],
    Outsider = spawn(fun outsider/0),
    Pid = spawn(fun() -> receive go -> procs_work(Outsider) end end),
    MRef = erlang:monitor(process, Pid),
    1 = erlang:trace(Pid, true, [{tracer, Port} | Flags]),
    Pid ! go,
    _ = wait_for({'DOWN', MRef, process, Pid, '_'}),
    Outsider ! stop,
    ok.

-spec procs_work(pid()) -> no_return().
procs_work(Outsider) ->
    Child = spawn(fun() -> receive stop -> ok end end),
    true = link(Child),
    true = unlink(Child),
    true = register(kprof_rec_proc, self()),
    true = unregister(kprof_rec_proc),
    %% Linked and unlinked by an untraced process.
    Outsider ! {link_me, self()},
    receive linked -> ok end,
    Outsider ! {unlink_me, self()},
    receive unlinked -> ok end,
    %% A child that dies linked to us, trapped.
    process_flag(trap_exit, true),
    Linked = spawn_link(fun() -> exit(child_gone) end),
    receive {'EXIT', Linked, child_gone} -> ok end,
    Child ! stop,
    erlang:yield(),
    %% Deleting a table this size yields once or twice while exiting:
    %% out_exiting / in_exiting.
    Table = ets:new(kprof_rec_table, []),
    true = ets:insert(Table, [{I, I} || I <- lists:seq(1, 10000)]),
    exit(procs_done).

-spec outsider() -> ok.
outsider() ->
    receive
        {link_me, Pid} -> link(Pid), Pid ! linked, outsider();
        {unlink_me, Pid} -> unlink(Pid), Pid ! unlinked, outsider();
        stop -> ok
    end.

%% e. Garbage collection, sends (to a pid, a name, a dead pid), receives.
-spec gc_send_receive(port()) -> ok.
gc_send_receive(Port) ->
    Flags = [garbage_collection, send, 'receive', monotonic_timestamp],
    Echo = spawn(fun echo/0),
    true = register(kprof_rec_echo, Echo),
    Dead = spawn(fun() -> ok end),
    wait_dead(Dead),
    Pid = spawn(fun() -> receive go -> gc_work(Echo, Dead) end end),
    1 = erlang:trace(Pid, true, [{tracer, Port} | Flags]),
    Pid ! go,
    _ = wait_for({done, Pid}),
    untrace(Pid),
    Pid ! stop,
    Echo ! stop,
    ok.

-spec gc_work(pid(), pid()) -> ok.
gc_work(Echo, Dead) ->
    Garbage = [lists:seq(1, 2000) || _ <- lists:seq(1, 5)],
    true = erlang:garbage_collect(),
    Echo ! {ping, self()},
    receive {pong, Echo} -> ok end,
    kprof_rec_echo ! {ping, self()},
    receive {pong, Echo} -> ok end,
    Dead ! hello,
    %% Past max_heap_size (not killed): gc_max_heap_size.
    _ = process_flag(max_heap_size, #{size => 2000, kill => false, error_logger => false}),
    More = lists:seq(1, 5000),
    _ = erlang:garbage_collect(),
    _ = process_flag(max_heap_size, 0),
    done(length(Garbage) + length(More)).

-spec echo() -> ok.
echo() ->
    receive
        {ping, From} -> From ! {pong, self()}, echo();
        stop -> ok
    end.

%% f. Ports: open/closed, port send/receive, port scheduling, and the
%% ports-related events of a process that opens one.
-spec ports(port()) -> ok.
ports(Port) ->
    ok = trace_ok(erlang:trace(new_ports, true,
                               [{tracer, Port}, ports, send, 'receive', running_ports,
                                monotonic_timestamp])),
    Cat = os:find_executable("cat"),
    Pid = spawn(fun() -> receive go -> port_work(Cat) end end),
    1 = erlang:trace(Pid, true, [{tracer, Port}, ports, procs, send, 'receive',
                                 monotonic_timestamp]),
    Pid ! go,
    _ = wait_for({done, Pid}),
    untrace(Pid),
    _ = erlang:trace(new_ports, false, [all]),
    Pid ! stop,
    ok.

-spec port_work(file:filename()) -> ok.
port_work(Exe) ->
    Cat = open_port({spawn_executable, Exe}, [binary, exit_status]),
    true = port_command(Cat, <<"hello port\n">>),
    receive {Cat, {data, _}} -> ok end,
    true = register(kprof_rec_port, Cat),
    true = unregister(kprof_rec_port),
    true = port_close(Cat),
    done(ok).

%% g. seq_trace messages to a system tracer port, with and without stamps.
-spec seq_trace(port()) -> ok.
seq_trace(Port) ->
    Old = seq_trace:set_system_tracer(Port),
    Echo = spawn(fun echo/0),
    Pid = spawn(fun() -> receive go -> seq_work(Echo) end end),
    Pid ! go,
    _ = wait_for({done, Pid}),
    _ = seq_trace:set_system_tracer(Old),
    Pid ! stop,
    Echo ! stop,
    ok.

-spec seq_work(pid()) -> ok.
seq_work(Echo) ->
    Round = fun(Label, StampFlag) ->
                    _ = seq_trace:set_token(label, Label),
                    [_ = seq_trace:set_token(F, true) || F <- [send, 'receive', print]],
                    [_ = seq_trace:set_token(StampFlag, true) || StampFlag =/= none],
                    Echo ! {ping, self()},
                    receive {pong, Echo} -> ok end,
                    _ = seq_trace:print(Label, {round, StampFlag}),
                    _ = seq_trace:set_token([])
            end,
    Round(17, none),
    Round(18, timestamp),
    Round(19, monotonic_timestamp),
    Round(20, strict_monotonic_timestamp),
    done(ok).

%% h. Atoms that need UTF-8: a module made at run time.
-spec unicode(port()) -> ok.
unicode(Port) ->
    {module, Mod} = load_unicode_module(),
    Pid = spawn(fun() -> receive go -> done(Mod:'héllo'(<<"ünï"/utf8>>)) end end),
    _ = erlang:trace_pattern({Mod, '_', '_'}, [{'_', [], [{return_trace}]}], [local]),
    1 = erlang:trace(Pid, true, [{tracer, Port}, call, arity, monotonic_timestamp]),
    Pid ! go,
    _ = wait_for({done, Pid}),
    untrace(Pid),
    Pid ! stop,
    ok.

-spec load_unicode_module() -> {module, module()}.
load_unicode_module() ->
    A = erl_anno:new(1),
    Forms = [{attribute, A, module, ?UNICODE_MOD},
             {attribute, A, export, [{'héllo', 1}, {'日本語', 0}]},
             {function, A, 'héllo', 1,
              [{clause, A, [{var, A, 'X'}], [],
                [{tuple, A, [{var, A, 'X'}, {call, A, {atom, A, '日本語'}, []}]}]}]},
             {function, A, '日本語', 0,
              [{clause, A, [], [], [{atom, A, 'résumé_完了'}]}]}],
    {ok, Mod, Bin} = compile:forms(Forms, [binary, return_errors]),
    code:load_binary(Mod, "kprof_rec_unicode.erl", Bin).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%%% Tracing helpers

%% Trace the calls of one worker running Fun, with a local pattern on
%% kprof_rec_work.
-spec trace_calls(port(), [atom()], ets:match_spec(), fun(() -> term())) -> ok.
trace_calls(Port, Flags, MatchSpec, Fun) ->
    {module, ?WORK} = code:ensure_loaded(?WORK),
    Pid = spawn(fun() -> receive go -> done(Fun()) end end),
    _ = erlang:trace_pattern({?WORK, '_', '_'}, MatchSpec, [local]),
    1 = erlang:trace(Pid, true, [{tracer, Port} | Flags]),
    Pid ! go,
    _ = wait_for({done, Pid}),
    untrace(Pid),
    _ = erlang:trace_pattern({?WORK, '_', '_'}, false, [local]),
    Pid ! stop,
    ok.

%% Workers send `{done, Pid, Result}' to the registered recording process.
-spec ensure_driver() -> ok.
ensure_driver() ->
    case whereis(kprof_record_driver) of
        Self when Self =:= self() -> ok;
        undefined -> true = register(kprof_record_driver, self()), ok
    end.

%% A process whose first function tail-calls leaf/0: its caller is
%% `undefined', and so is what it returns to.
-spec trace_await(port(), [atom()], ets:match_spec()) -> ok.
trace_await(Port, Flags, MatchSpec) ->
    _ = erlang:trace_pattern({?WORK, leaf, 0}, MatchSpec, [local]),
    Pid = spawn(?WORK, await, []),
    MRef = erlang:monitor(process, Pid),
    1 = erlang:trace(Pid, true, [{tracer, Port} | Flags]),
    Pid ! go,
    _ = wait_for({'DOWN', MRef, process, Pid, '_'}),
    _ = erlang:trace_pattern({?WORK, leaf, 0}, false, [local]),
    ok.

%% The worker's last act: report, then wait to be untraced and stopped.
-spec done(term()) -> ok.
done(Result) ->
    erlang:whereis(kprof_record_driver) ! {done, self(), Result},
    receive stop -> ok end.

-spec untrace(pid()) -> ok.
untrace(Pid) ->
    _ = erlang:trace(Pid, false, [all]),
    ok.

-spec trace_ok(integer()) -> ok.
trace_ok(N) when is_integer(N) -> ok.

-spec clear_all_tracing() -> ok.
clear_all_tracing() ->
    _ = erlang:trace(all, false, [all]),
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    _ = erlang:trace_pattern({'_', '_', '_'}, false, [global]),
    ok.

%% Every trace message handed to the port, and the port's queue written.
-spec drain(port()) -> ok.
drain(Port) ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after ?TIMEOUT -> error(trace_delivered) end,
    wait_queue_empty(Port, 500).

-spec wait_queue_empty(port(), non_neg_integer()) -> ok.
wait_queue_empty(_Port, 0) ->
    error(port_queue_not_drained);
wait_queue_empty(Port, N) ->
    case erlang:port_info(Port, queue_size) of
        {queue_size, 0} -> ok;
        _ -> timer:sleep(10), wait_queue_empty(Port, N - 1)
    end.

-spec wait_os_exit(integer()) -> ok.
wait_os_exit(OsPid) ->
    wait_os_exit("/proc/" ++ integer_to_list(OsPid) ++ "/stat", 500).

-spec wait_os_exit(string(), non_neg_integer()) -> ok.
wait_os_exit(_Stat, 0) ->
    error(cat_did_not_exit);
wait_os_exit(Stat, N) ->
    case file:read_file(Stat) of
        {ok, _} -> timer:sleep(10), wait_os_exit(Stat, N - 1);
        {error, _} -> ok            % enoent, or esrch while it goes
    end.

-spec wait_dead(pid()) -> ok.
wait_dead(Pid) ->
    MRef = erlang:monitor(process, Pid),
    receive {'DOWN', MRef, process, Pid, _} -> ok end.

%% Wait for a message matching a shape ('_' matches anything).
-spec wait_for(tuple()) -> tuple().
wait_for(Shape) ->
    receive
        Msg when tuple_size(Msg) >= tuple_size(Shape) ->
            case matches(Shape, Msg) of
                true -> Msg;
                false -> self() ! Msg, wait_for(Shape)
            end
    after ?TIMEOUT ->
            error({timeout_waiting_for, Shape})
    end.

-spec matches(tuple(), tuple()) -> boolean().
matches(Shape, Msg) when tuple_size(Shape) =< tuple_size(Msg) ->
    lists:all(fun(I) ->
                      S = element(I, Shape),
                      S =:= '_' orelse S =:= element(I, Msg)
              end, lists:seq(1, tuple_size(Shape)));
matches(_, _) ->
    false.

-spec big_binary(non_neg_integer()) -> binary().
big_binary(N) ->
    << <<(I rem 251)>> || I <- lists:seq(1, N) >>.

%%% Reading the recording back

-spec frames(binary()) -> [binary()].
frames(<<>>) -> [];
frames(<<Len:32, Frame:Len/binary, Rest/binary>>) -> [Frame | frames(Rest)];
frames(Tail) -> error({truncated_frame, byte_size(Tail)}).

-spec report(string(), binary(), [binary()]) -> ok | {error, term()}.
report(Name, Data, Lines) ->
    Kinds = lists:foldl(fun(L, Acc) ->
                                [K | _] = binary:split(L, <<" ">>),
                                maps:update_with(K, fun(C) -> C + 1 end, 1, Acc)
                        end, #{}, Lines),
    io:format("~-16s ~4b frames ~7b bytes  ~ts~n",
              [Name, length(Lines), byte_size(Data),
               lists:join(" ", [io_lib:format("~ts=~b", [K, C])
                                || {K, C} <- lists:sort(maps:to_list(Kinds))])]),
    case byte_size(Data) < ?MAX_FILE of
        true -> ok;
        false -> {error, {too_big, Name, byte_size(Data)}}
    end.

%%% The fields of an expectation line

-spec kind(tuple()) -> binary().
kind({seq_trace, _Label, _Info}) -> <<"seq_trace">>;
kind({seq_trace, _Label, _Info, _Ts}) -> <<"seq_trace">>;
kind(Msg) when element(1, Msg) =:= trace; element(1, Msg) =:= trace_ts ->
    atom_to_binary(element(3, Msg), utf8).

-spec pid(tuple()) -> binary().
pid(Msg) when element(1, Msg) =:= seq_trace -> <<"-">>;
pid(Msg) -> id_text(element(2, Msg)).

-spec mfa(tuple()) -> binary().
mfa(Msg) when element(1, Msg) =:= seq_trace ->
    <<"-">>;
mfa(Msg) ->
    case element(3, Msg) of
        K when K =:= call; K =:= return_from; K =:= exception_from; K =:= return_to;
               K =:= in; K =:= out; K =:= in_exiting; K =:= out_exiting;
               K =:= out_exited ->
            mfa_text(element(4, Msg));
        K when K =:= spawn; K =:= spawned ->
            mfa_text(element(5, Msg));
        _ ->
            <<"-">>
    end.

-spec ts(tuple()) -> binary().
ts({seq_trace, _, _}) -> <<"-">>;
ts({seq_trace, _, _, Ts}) -> ts_text(Ts);
ts(Msg) when element(1, Msg) =:= trace_ts -> ts_text(element(tuple_size(Msg), Msg));
ts(_) -> <<"-">>.

-spec label(tuple()) -> binary().
label({seq_trace, Label, _}) -> w(Label);
label({seq_trace, Label, _, _}) -> w(Label);
label(Msg) when element(3, Msg) =:= register; element(3, Msg) =:= unregister ->
    w(element(4, Msg));   % the sink interns registered names
label(Msg) ->
    case call_extra(Msg) of
        {ok, Token} when tuple_size(Token) =:= 5 -> w(element(2, Token));
        {ok, {Token, _Caller}} when tuple_size(Token) =:= 5 -> w(element(2, Token));
        {ok, {Token, _Caller, _Payload}} when tuple_size(Token) =:= 5 -> w(element(2, Token));
        _ -> <<"-">>
    end.

-spec other(tuple()) -> binary().
other(Msg) when element(1, Msg) =:= seq_trace ->
    <<"-">>;
other(Msg) ->
    case element(3, Msg) of
        K when K =:= spawn; K =:= spawned; K =:= link; K =:= unlink;
               K =:= getting_linked; K =:= getting_unlinked; K =:= open ->
            id_text(element(4, Msg));
        K when K =:= send; K =:= send_to_non_existing_process ->
            case element(5, Msg) of
                To when is_pid(To) -> id_text(To);
                _ -> <<"-">>
            end;
        _ ->
            <<"-">>
    end.

-spec caller(tuple()) -> binary().
caller(Msg) when element(1, Msg) =:= seq_trace ->
    <<"-">>;
caller(Msg) ->
    case call_extra(Msg) of
        {ok, {M, F, A}} when is_atom(M), is_atom(F), is_integer(A) -> mfa_text({M, F, A});
        {ok, {_Token, {M, F, A}}} when is_atom(M), is_atom(F), is_integer(A) ->
            mfa_text({M, F, A});
        {ok, {_Token, {M, F, A}, _Payload}} when is_atom(M), is_atom(F), is_integer(A) ->
            mfa_text({M, F, A});
        _ -> <<"-">>
    end.

%% The match-spec extra of a call message: the element after the MFA,
%% before the timestamp if there is one.
-spec call_extra(tuple()) -> {ok, term()} | none.
call_extra({trace, _Pid, call, _MFA, Extra}) -> {ok, Extra};
call_extra({trace_ts, _Pid, call, _MFA, Extra, _Ts}) -> {ok, Extra};
call_extra(_) -> none.

-spec mfa_text(term()) -> binary().
mfa_text({M, F, A}) when is_atom(M), is_atom(F), (is_integer(A) orelse is_list(A)) ->
    Arity = case A of
                N when is_integer(N) -> N;
                Args -> length(Args)
            end,
    <<(atom_to_binary(M, utf8))/binary, ":", (atom_to_binary(F, utf8))/binary,
      "/", (integer_to_binary(Arity))/binary>>;
mfa_text(_) ->
    <<"-">>.

-spec ts_text(integer() | {integer(), integer()} | erlang:timestamp()) -> binary().
ts_text(Mono) when is_integer(Mono) ->
    integer_to_binary(Mono);
ts_text({Mono, Unique}) when is_integer(Mono), is_integer(Unique) ->
    integer_to_binary(Mono);
ts_text({Mega, Sec, Micro}) ->
    integer_to_binary((Mega * 1000000 + Sec) * 1000000000 + Micro * 1000).

-spec id_text(term()) -> binary().
id_text(Pid) when is_pid(Pid) -> list_to_binary(pid_to_list(Pid));
id_text(Port) when is_port(Port) -> list_to_binary(port_to_list(Port));
id_text(_) -> <<"-">>.

-spec w(term()) -> binary().
w(Term) ->
    unicode:characters_to_binary(io_lib:format("~w", [Term])).

-spec to_string(atom() | string()) -> string().
to_string(A) when is_atom(A) -> atom_to_list(A);
to_string(S) when is_list(S) -> S.
