%%% @doc Helpers shared by the EUnit suites: waiting for a condition, loading
%%% a module's own object code again, kprof on the fault-injection sink, what
%%% a function prints, and a distributed node with peers that load kprof.
-module(kprof_test_util).

-export([wait_until/2, wait_or_say/3, reload/1, fault_sink/0, start_fault_sink/1, capture_io/1,
         distributed/1, peer_args/1, tmp_dir/1, alert_conforms/2, caught/1,
         http/3, start/1]).
-export([kprof_sessions/0, trace_info/2, kprof_traced/1, leftovers/0, kprof_tracers_left/0,
         start_quiet/1, stop_quiet/1]).
-export([with_second_user/3, tool/1, run/2, os_gone/1]).

%% @doc The OS process is gone, or a zombie nobody has reaped yet.
-spec os_gone(integer()) -> boolean().
os_gone(OsPid) ->
    case file:read_file("/proc/" ++ integer_to_list(OsPid) ++ "/stat") of
        {ok, Stat} ->
            %% "pid (comm) S ...": the state follows the last ')'.
            [_, Rest] = string:split(Stat, ")", trailing),
            binary:first(string:trim(Rest, leading)) =:= $Z;
        {error, _} ->
            true
    end.

%% @doc httpc:request/4 for the suites' loopback servers (plain http).
%% `{ssl, []}': httpc's default ssl options read the OS's CA certificates
%% (public_key:cacerts_get/0) for every request, http too, and from OTP 26
%% crash where the system has none (pubkey_os_cacerts
%% conv_error_reason(no_cacerts_found)); a loopback http request needs none.
-spec http(get | post, tuple(), list()) -> term().
http(Method, Request, HttpOpts) ->
    httpc:request(Method, Request, [{ssl, []} | HttpOpts], []).

%% @doc What `catch F()' gives, without `catch Expr' (OTP 29 deprecates it):
%% F's value, a thrown term, `{'EXIT', Reason}' of an exit, `{'EXIT',
%% {Reason, Stack}}' of an error.
-spec caught(fun(() -> T)) -> T | term().
caught(F) ->
    try F()
    catch
        throw:T -> T;
        exit:R -> {'EXIT', R};
        error:R:S -> {'EXIT', {R, S}}
    end.

%% @doc Polls `F' until it returns `true', sleeping 20 ms between calls;
%% `error(timeout)' after `Ms' div 20 + 1 calls returned `false'. The bound is
%% a count of calls, not wall time: a loaded machine stretches the sleeps, and
%% an `F' that blocks (a call with its own timeout) adds its own time each
%% call.
-spec wait_until(fun(() -> boolean()), integer()) -> ok.
wait_until(F, Ms) when Ms =< 0 ->
    case F() of true -> ok; false -> error(timeout) end;
wait_until(F, Ms) ->
    case F() of
        true -> ok;
        false -> timer:sleep(20), wait_until(F, Ms - 20)
    end.

%% @doc {@link wait_until/2}; on its timeout the error is what `Say()' gives
%% (what the test saw, for a failure that names itself).
-spec wait_or_say(fun(() -> boolean()), integer(), fun(() -> term())) -> ok.
wait_or_say(F, Ms, Say) ->
    case caught(fun() -> wait_until(F, Ms) end) of
        ok -> ok;
        _ -> error(Say())
    end.

%% @doc `Info' of an alert of kind `Kind' has kprof's one shape (the
%% documented `kprof_alert:info()'): `what' among those {@link
%% kprof_alert:kinds/0} gives for `Kind' (any kind of
%% `kprof_guard:abort/2''s callers: `what' is then the kind itself, unless
%% they gave one), `value' and `bound' (a number or `undefined' for the
%% kinds kprof sends), and a readable `message' that starts with the kind.
%% Returns `Info'.
-spec alert_conforms(atom(), map()) -> map().
alert_conforms(Kind, Info) ->
    #{what := What, value := Value, bound := Bound, message := Msg} = Info,
    true = is_atom(What),
    case kprof_alert:kinds() of
        #{Kind := Whats} ->
            true = lists:member(What, Whats) orelse {not_documented, Kind, What, Whats},
            %% An exit status or reason is any term; figures are numbers.
            Figures = [Bound | [Value || not lists:member(What, [sink_status, sink_server,
                                                                  owner])]],
            [] = [V || V <- Figures, not is_number(V), V =/= undefined];
        #{} ->
            ok
    end,
    true = is_binary(Msg),
    KindText = atom_to_binary(Kind),
    <<KindText:(byte_size(KindText))/binary, _/binary>> = Msg,
    Info.

%% @doc A new version of `Mod', its own object code loaded again, as a code
%% upgrade does: its trace patterns are gone.
-spec reload(module()) -> ok.
reload(Mod) ->
    _ = code:purge(Mod),
    {Mod, Bin, File} = code:get_object_code(Mod),
    {module, Mod} = code:load_binary(Mod, File, Bin),
    _ = code:soft_purge(Mod),
    ok.

%% @doc The fault-injection build of the sink, `_build/fault/kprof_sink' (`make
%% eunit' builds it): the product's sources with `{test_delay_us, Us}', which
%% makes the sink sleep that long per trace message. The product sink in
%% priv/ has no such command.
-spec fault_sink() -> file:filename().
fault_sink() ->
    %% The checkout this module was compiled from (make and rebar3 alike).
    Source = proplists:get_value(source, ?MODULE:module_info(compile)),
    Root = filename:dirname(filename:dirname(filename:dirname(Source))),
    Path = filename:join([Root, "_build", "fault", "kprof_sink"]),
    case filelib:is_regular(Path) of
        true -> Path;
        false -> error({fault_sink_not_built, Path, "make _build/fault/kprof_sink"})
    end.

%% @doc kprof started afresh with `Opts', whatever ran before: a suite sets
%% up what it needs, in any order of the suites (rebar3 eunit runs them in
%% another order than make eunit, and a suite that left kprof running made
%% the next one's kprof:start/1 answer `{error, already_started}').
%%
%% It starts once the VM holds no earlier sink's port: a port tracer's
%% backlog keeps a killed sink's port in the VM until the queue is worked
%% through (doc/guard.md, "Through the port tracer"), and a test started
%% beside it would wait on that backlog, failing for a test before it. The
%% wait is said, with the ports and their queues; past ?OLD_PORTS_MS it is
%% an error that names them.
-spec start(map()) -> ok.
start(Opts) ->
    ok = kprof:stop(),
    ok = old_sinks_gone(),
    ok = kprof:start(Opts).

-define(OLD_PORTS_MS, 180000).

-spec old_sinks_gone() -> ok.
old_sinks_gone() ->
    T0 = erlang:monotonic_time(millisecond),
    case sink_ports() of
        [] ->
            ok;
        Old ->
            Gone = caught(fun() -> wait_until(fun() -> sink_ports() =:= [] end, ?OLD_PORTS_MS) end),
            io:format(user, "~nkprof_test_util: waited ~b ms for earlier sinks' ports ~0p: ~p~n",
                      [erlang:monotonic_time(millisecond) - T0, Old, Gone]),
            case Gone of
                ok -> ok;
                _ -> error({earlier_sink_ports, sink_ports(), ?OLD_PORTS_MS})
            end
    end.

%% The ports of kprof sinks (the product's and the fault-injection build).
-spec sink_ports() -> [{port(), integer()}].
sink_ports() ->
    [{P, Q} || P <- erlang:ports(),
               {name, Name} <- [erlang:port_info(P, name)],
               filename:basename(Name) =:= "kprof_sink",
               {queue_size, Q} <- [erlang:port_info(P, queue_size)]].

%% @doc kprof restarted with `Opts' on the fault-injection sink.
-spec start_fault_sink(map()) -> ok.
start_fault_sink(Opts) ->
    start(Opts#{sink_path => fault_sink()}).

%% @doc What `Fun' prints to its group leader, as a binary (a group leader of
%% its own stands in while it runs).
-spec capture_io(fun(() -> term())) -> binary().
capture_io(Fun) ->
    Old = group_leader(),
    Io = spawn(fun() -> collect_io([]) end),
    group_leader(Io, self()),
    try
        Fun()
    after
        group_leader(Old, self())
    end,
    Io ! {text, self()},
    receive {text, Io, Text} -> Text after 5000 -> error(no_text) end.

collect_io(Acc) ->
    receive
        {io_request, From, Ref, {put_chars, Enc, Chars}} ->
            From ! {io_reply, Ref, ok},
            collect_io([Acc, unicode:characters_to_binary(Chars, Enc)]);
        {io_request, From, Ref, {put_chars, Enc, M, F, A}} ->
            From ! {io_reply, Ref, ok},
            collect_io([Acc, unicode:characters_to_binary(apply(M, F, A), Enc)]);
        {io_request, From, Ref, _} ->
            From ! {io_reply, Ref, {error, enotsup}},
            collect_io(Acc);
        {text, Pid} ->
            Pid ! {text, self(), iolist_to_binary(Acc)}
    end.

%% @doc Makes this node distributed under a random name made from `Name'
%% (peer:random_name/1: other worktrees run the same suites on the machine at
%% once; short names, epmd started if needed) unless it already is; `true'
%% if it did, so the caller stops it.
-spec distributed(atom()) -> boolean().
distributed(Name) ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            {ok, _} = net_kernel:start([list_to_atom(peer:random_name(Name)), shortnames]),
            true;
        _ ->
            false
    end.

%% @doc The arguments that give a peer node kprof's and the suite `Mod''s code.
-spec peer_args(module()) -> [string()].
peer_args(Mod) ->
    ["-pa", filename:dirname(code:which(kprof)),
     "-pa", filename:dirname(code:which(Mod))].

%% @doc The trace sessions of kprof's on this node, as
%% `trace:session_info(all)' names them (`{Name, Id}'): OTP 27 and later
%% (kprof_trace_session); `[]' before, where there are no sessions. Asked of
%% the VM directly, not of the module under test. Told apart by the OTP
%% release, not by looking for the `trace' module: before OTP 27 each such
%% look is a search of the code path by the code server, and a scan of every
%% loaded function (kprof_tiers_tests' traced_modules/0, about 87,000 calls)
%% then took over 120 s on a loaded machine.
-spec kprof_sessions() -> [{atom(), term()}].
kprof_sessions() ->
    case list_to_integer(erlang:system_info(otp_release)) >= 27 of
        true ->
            Trace = list_to_atom("trace"),
            [S || S = {Name, _} <- Trace:session_info(all),
                  lists:prefix("kprof_", atom_to_list(Name))];
        false -> []
    end.

%% @doc `erlang:trace_info(What, Item)' as kprof set it: on OTP 27 and
%% later kprof traces in sessions of its own, so the first of them whose
%% answer is not an untraced one; else (and before OTP 27) the legacy API's
%% answer, which on OTP 27 and later is the untraced one unless the test
%% traced there itself.
-spec trace_info(term(), atom()) -> term().
trace_info(What, Item) ->
    Trace = list_to_atom("trace"),
    Ours = [R || S <- kprof_sessions(),
                 R <- [try Trace:info(S, What, Item) catch error:badarg -> undefined end],
                 not untraced(R)],
    case Ours of
        [R | _] -> R;
        [] -> erlang:trace_info(What, Item)
    end.

%% @doc Whether kprof traces `P' with `call': in a session of its own (OTP
%% 27+), or in the legacy API's with a tracer of kprof's (the NIF of any
%% generation, or the sink's port).
-spec kprof_traced(pid()) -> boolean().
kprof_traced(P) ->
    Call = fun({flags, Fs}) -> lists:member(call, Fs);
              (_) -> false
           end,
    Trace = list_to_atom("trace"),
    Port = try kprof_sink:port() catch _:_ -> undefined end,
    lists:any(fun(S) -> Call(try Trace:info(S, P, flags) catch error:badarg -> [] end) end,
              kprof_sessions())
        orelse (case caught(fun() -> erlang:trace_info(P, tracer) end) of
                    {tracer, {kprof_tracer, _}} -> true;
                    {tracer, Port} -> is_port(Port);
                    _ -> false
                end andalso Call(caught(fun() -> erlang:trace_info(P, flags) end))).

untraced(undefined) -> true;
untraced({_, undefined}) -> true;
untraced({_, false}) -> true;
untraced({flags, []}) -> true;
untraced({tracer, []}) -> true;
untraced(_) -> false.

%% @doc Every trace setting of kprof's still on the node: a trace session of
%% kprof's (OTP 27+: all the rest of its settings are in one), and in the
%% legacy API's session processes whose tracer is kprof's (the sink's port,
%% the tracer NIF), patterns on the functions of loaded modules (one
%% function of each, whose pattern a module-wide or node-wide one would have
%% set), meta patterns, and on_load.
-spec leftovers() -> list().
leftovers() ->
    Patterns = [{pattern, MFA, What}
                || {M, _} <- code:all_loaded(), MFA <- first_function(M),
                   {What, V} <- [caught(fun() -> erlang:trace_info(MFA, Item) end)
                                 || Item <- [traced, meta]],
                   V =/= false, V =/= undefined, V =/= []],
    OnLoad = case erlang:trace_info(on_load, traced) of
                 {traced, false} -> [];
                 Other -> [{on_load, Other}]
             end,
    kprof_tracers_left() ++ Patterns ++ OnLoad.

%% @doc As {@link leftovers/0} without the patterns (a test whose own tracer
%% has patterns of the legacy API beside kprof's): kprof's sessions and the
%% processes whose tracer in the legacy API's session is kprof's.
-spec kprof_tracers_left() -> list().
kprof_tracers_left() ->
    Port = caught(fun() -> kprof_sink:port() end),
    Procs = [{flags, P, T} || P <- processes(), P =/= self(),
                              {tracer, T} <- [caught(fun() -> erlang:trace_info(P, tracer) end)],
                              is_kprof(T, Port)],
    kprof_sessions() ++ Procs.

is_kprof({kprof_tracer, _}, _Port) -> true;
is_kprof(Port, Port) when is_port(Port) -> true;
is_kprof(_, _) -> false.

first_function(M) ->
    case caught(fun() -> M:module_info(functions) end) of
        [{F, A} | _] -> [{M, F, A}];
        _ -> []
    end.

%% @doc kprof started, warnings and below not logged (the suites provoke
%% them), and a directory of the test's own (see {@link tmp_dir/1}).
-spec start_quiet(string()) -> file:filename().
start_quiet(Prefix) ->
    logger:set_handler_config(default, level, error),
    ok = start(#{}),
    tmp_dir(Prefix).

%% @doc kprof stopped, the directory gone, logging back.
-spec stop_quiet(file:filename()) -> ok.
stop_quiet(Dir) ->
    _ = kprof:stop(),
    _ = file:del_dir_r(Dir),
    logger:set_handler_config(default, level, all).

%% @doc A new directory under /tmp whose name starts with `Prefix' and is
%% this VM's alone (its OS pid and a unique integer).
-spec tmp_dir(string()) -> file:filename().
tmp_dir(Prefix) ->
    Dir = filename:join("/tmp", Prefix ++ "-" ++ os:getpid() ++ "-" ++
                            integer_to_list(erlang:unique_integer([positive]))),
    ok = filelib:ensure_path(Dir),
    Dir.

%% @doc `Fun(User, Runuser)' as root with a system user made for it (`Prefix'
%% and a number; no home, no shell) and removed after, whatever happens (its
%% processes may take a moment to exit first). Not root, or without useradd,
%% userdel or runuser: `Suite' says SKIPPED, loudly, and Fun does not run.
-spec with_second_user(module(), string(), fun((string(), string()) -> term())) -> term().
with_second_user(Suite, Prefix, Fun) ->
    case {os:cmd("/usr/bin/id -u"), tool(useradd), tool(userdel), tool(runuser)} of
        {"0\n", UA, UD, RU} when UA =/= false, UD =/= false, RU =/= false ->
            User = Prefix ++ integer_to_list(erlang:unique_integer([positive]) rem 100000000),
            {0, _} = run(UA, ["--system", "--no-create-home", "--user-group",
                              "--shell", "/usr/sbin/nologin", User]),
            try
                Fun(User, RU)
            after
                ok = wait_until(fun() -> element(1, run(UD, [User])) =:= 0 end, 10000)
            end;
        {"0\n", _, _, _} ->
            io:format(user, "~n*** ~s: SKIPPED: useradd, userdel or runuser missing "
                      "(packages passwd, util-linux) ***~n", [Suite]);
        {Uid, _, _, _} ->
            io:format(user, "~n*** ~s: SKIPPED: needs root to make a second user (uid "
                      "here: ~ts) ***~n", [Suite, string:trim(Uid)])
    end.

%% @doc A system tool's absolute path, or `false'.
-spec tool(atom()) -> file:filename() | false.
tool(Name) ->
    Dirs = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"],
    case [P || D <- Dirs, P <- [filename:join(D, atom_to_list(Name))], filelib:is_regular(P)] of
        [P | _] -> P;
        [] -> false
    end.

%% @doc Runs `Exe' (an absolute path, no shell) with `Args': `{ExitStatus,
%% Output}', the output a string (stderr too); `error({timeout, Port})' after 30 s.
-spec run(file:filename(), [string()]) -> {non_neg_integer(), string()}.
run(Exe, Args) ->
    Port = open_port({spawn_executable, Exe}, [{args, Args}, exit_status, stderr_to_stdout,
                                               binary]),
    collect(Port, []).

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [Acc, D]);
        {Port, {exit_status, S}} -> {S, unicode:characters_to_list(iolist_to_binary(Acc))}
    after 30000 ->
            error({timeout, Port})
    end.
