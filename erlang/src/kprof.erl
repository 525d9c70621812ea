%%% @doc kprof: an off-node profiler for the Erlang VM.
%%%
%%% kprof hands the VM's trace events to a C program, `kprof_sink'. By
%%% default (`tracer => ring', {@link start/1}) the `kprof_tracer' erl_tracer
%%% NIF writes each event as a record into a shared-memory ring that the sink
%%% reads every 1 to 16 ms (paced by how fast the rings fill); a full ring drops and counts, it never blocks the
%%% traced process. With `tracer => port' the sink's port is the tracer: the
%%% VM encodes every event with `term_to_binary' and the port writes it to
%%% the sink's stdin. Either way no Erlang process receives, stores or counts
%%% trace messages, so tracing does not grow any process's mailbox; the sink
%%% does the counting and answers questions about it.
%%%
%%% ```
%%%  traced processes --(kprof_tracer NIF, a record per event)--> ring --+
%%%                   --(or {tracer, Port}: one frame per event)--+      |
%%%                                                               v      v
%%%  kprof:sink_*() --> kprof_sink server --{kprof,Ref,Cmd}--> port --> kprof_sink (C)
%%%        ^                                                               |
%%%        +---------------- {kprof_reply, Ref, Reply} <-------------------+
%%% '''
%%%
%%% A command is written in the same stream as the port's trace messages, so
%%% its reply comes after every event the port received before it, and the
%%% sink reads the ring up to the records written before the command:
%%% `sink_sync()' is a barrier for both.
%%%
%%% == A session ==
%%%
%%% Build the sink (`make sink') and the beams (`make erl'), then:
%%%
%%% ```
%%% $ erl -pa erlang/ebin
%%% 1> kprof:start().
%%% ok
%%% 2> kprof:sink_ping().
%%% pong
%%% 3> Port = kprof:sink_port().
%%% #Port<0.6>
%%% '''
%%% Trace some calls with the port as the tracer: here 1000 calls of
%%% `lists:seq/2' made by one process.
%%% ```
%%% 4> Pid = spawn(fun() -> receive go -> [lists:seq(1, 3) || _ <- lists:seq(1, 1000)] end end).
%%% <0.91.0>
%%% 5> erlang:trace_pattern({lists, seq, 2}, [{'_', [], [{return_trace}]}], [local]).
%%% 1
%%% 6> erlang:trace(Pid, true, [call, arity, monotonic_timestamp, {tracer, Port}]).
%%% 1
%%% 7> Pid ! go.
%%% go
%%% 8> kprof:sink_sync().
%%% {synced,2004}
%%% 9> kprof:sink_calls().
%%% [{{lists,seq,2},1001}]
%%% 10> maps:with([call, return_from], maps:get(events, kprof:sink_stats())).
%%% #{call => 1001,return_from => 1001}
%%% 11> kprof:sink_reset().
%%% ok
%%% 12> kprof:sink_calls().
%%% []
%%% 13> kprof:stop().
%%% ok
%%% '''
%%% (1001: the comprehension's own `lists:seq(1, 1000)' counts too; 2004
%%% frames: 2002 trace messages, the ping and the sync. In a program, wait
%%% for the traced work to end, and for `erlang:trace_delivered/1', before
%%% `sink_sync()'.)
%%%
%%% == Tiers: where each kind of request spends its time ==
%%%
%%% Name the tiers of a service by their functions, wrap requests (or let
%%% `entry' functions, `kprof_tiers_httpd' or `kprof_tiers_mochiweb' do it), and ask
%%% for the table; work done for a request in other processes (a
%%% gen_server it calls) counts for it. From examples/tiers_shop.erl (its
%%% `run/0' starts the shop's two servers, then does this for 200 requests):
%%% ```
%%% 1> kprof:start_tiers([{http, [{tiers_shop, page, 1}]},
%%%                       {database, [{tiers_shop, query, 1}]},
%%%                       {templating, [{tiers_shop, render, 1}]}], #{slow_ms => 8}).
%%% ok
%%% 2> kprof:request({users, get}, fun() -> tiers_shop:page({users, get}) end).
%%% <<131,107,0,1,1>>
%%% 3> kprof:report().
%%% kprof tiers on nonode@nohost: 0.823 s traced, requests 200 recorded (seen 200, sampled 200), 0 in flight, events 2000, dropped 0, tracing on
%%% times in ms; per tier its self time (time in its own code); other: time in no tier
%%% identity       reqs  http          database      templating    other
%%%                      mean   p99    mean   p99    mean   p99    mean
%%% all             200  1.67   7.93   1.70   8.06   0.560  5.18   0.037
%%% {users,get}     150  1.32   9.31   0.853  5.31   0.213  4.26   0.044
%%% {orders,list}    50  2.74   7.54   4.22   9.24   1.60   6.23   0.018
%%% slowest requests (wall ms, identity, pid, start, self ms per tier):
%%%   14.6  {users,get}  <0.232.0>  2026-11-22T00:40:30.051Z  http 12.7 database 1.71 templating 0.128  other 0.032
%%% 4> kprof:stop_tiers().
%%% ok
%%% '''
%%% {@link report/1} also gives the table as a map or as JSON; tiers run
%%% on several nodes at once (option `nodes'), sample requests (`sample')
%%% and report a rolling window (`window'). {@link kprof_tiers} has the
%%% details.
%%%
%%% == Call counts ==
%%%
%%% How often each function of a spec is called, in every process, for a
%%% while: {@link calls/2}, recon_trace's counting through the ring, guarded
%%% like the tiers ({@link kprof_calls} has the session):
%%% ```
%%% 1> kprof:calls({ets, lookup, 2}, #{ms => 500}).
%%% kprof calls: 1 functions, 243 calls in 0.501 s (stopped: ms)
%%%     calls      %  function
%%%       243  100.0  ets:lookup/2
%%% {ok,[#{calls => 243,mfa => {ets,lookup,2}}]}
%%% '''
%%%
%%% == Record and replay ==
%%%
%%% Any flame capture also writes its raw event stream to a file with
%%% `record => Path' (zstd, bounded by `max_record_bytes', rotated with
%%% `record_rotate'; `output_format => []' records only), and {@link replay/2}
%%% writes the files of that capture later, from the file, on any node with
%%% kprof (the traced modules need not be there):
%%% ```
%%% 1> kprof:flame_apply(fun() -> compile:file("kprof_hist.erl", [binary]) end,
%%%                      #{output_format => [], record => "/tmp/rr/c.kprec"}).
%%% {ok,{ok,kprof_hist,<<...>>},["/tmp/rr/c.kprec"]}
%%% 2> kprof:replay("/tmp/rr/c.kprec", #{output_format => [folded, callgrind]}).
%%% {ok,["/tmp/rr/./c.kprec.folded","/tmp/rr/./callgrind.out.c.kprec"]}
%%% '''
%%% `kprof_sink --replay FILE' does the same with no VM (doc/record-replay.md;
%%% {@link kprof_flame_replay}).
%%%
%%% == Safety ==
%%%
%%% <ul>
%%% <li>Every function returns within a bound, whatever the sink does (frozen,
%%%     killed, flooded), checked by kprof_fault_tests with the sink frozen.
%%%     With T the `call_timeout' (option of {@link start/1}, 5000 ms):
%%%     <ul>
%%%     <li>at once: `sink_port/0', `subscribe/0', `unsubscribe/0',
%%%         `request/2' (but for the fun), `set_token/1', `clear_token/0',
%%%         `stop_tiers/0' (what it asks the sink is sent, not waited for);</li>
%%%     <li>T: every `sink_*' function (`{error, timeout}' when the sink does
%%%         not answer), `start_tiers/2' on one node, `full_trace_flame/2';
%%%         a flame capture that cannot start says `{error, {sink, timeout}}'
%%%         within T;</li>
%%%     <li>2 s: `status/0' (the sink's health is a ping of 1 s);</li>
%%%     <li>6 s: `report/1' (a sink that does not answer in 2 s gives the rows of
%%%         the last poll, flagged incomplete); `reset/0': 2T; `reset/0' and
%%%         `start_tiers/2' up to 2 s more when they wait behind a report in
%%%         the tiers server;</li>
%%%     <li>flame captures, once tracing: `flame_apply' the function's own time,
%%%         `flame_pid' its `Millis' (60 s at most), `flame_capture' its
%%%         `timeout' option; then at most 30 s for the files (and, through
%%%         the port tracer, 30 s more for the VM to hand over its queue), a
%%%         few T for the sink's bookkeeping; a sink that does not answer
%%%         within those 30 s is killed and restarted;</li>
%%%     <li>`calls/1,2': T to start (the ring, the sink's counts before),
%%%         its `ms' (or less, at `max' calls), then at most 5 s for the VM
%%%         to deliver what it traced and 30 s for the sink's count (at once
%%%         through the ring; a port tracer's backlog may take that long); a
%%%         sink that dies ends it at once;</li>
%%%     <li>`stop/0': each server's shutdown, 5 s at most.</li>
%%%     </ul></li>
%%% <li>If the sink dies, pending calls get `{error, {sink_down, Status}}',
%%%     a warning is logged and the sink is restarted with a new port; the
%%%     VM has dropped the tracing that used the old one. Processes that
%%%     called {@link kprof_sink:subscribe/0} get
%%%     `{kprof_alert, sink_down, #{what => sink_status, value => Status,
%%%     status => Status, bound => undefined, message => Text}}', the shape of
%%%     every alert ({@link kprof_alert}).</li>
%%% <li>Stopping the application closes the port; the sink exits when its
%%%     stdin closes, and the VM stops tracing to it.</li>
%%% <li>Options are checked before anything starts: a bad option changes
%%%     nothing. They are a map, or a keyword list (`[{Key, Value}]', as
%%%     Elixir writes them; the first of a repeated key wins).</li>
%%% <li>Every function of this module answers a bad argument with
%%%     `{error, Reason}' naming it (`{bad_option, Key, Value}' for a bad
%%%     value, `{unknown_options, [Key]}' for keys the function does not
%%%     take, `{bad_options, Opts}' for options that are neither a map nor a
%%%     keyword list,
%%%     `{bad_fun, F}', `{badarg, X}', ...), never with an exception;
%%%     lists in arguments and options must be proper lists.</li>
%%% </ul>
-module(kprof).

%% PUBLIC
-export([start/0, start/1, stop/0, help/0, help/1]).
-export([sink_port/0, sink_ping/0, sink_version/0, sink_stats/0, sink_memory/0,
         sink_sync/0, sink_reset/0, sink_calls/0]).
%% SAFETY
-export([subscribe/0, unsubscribe/0, status/0]).

%% TIERS
-export([start_tiers/2, stop_tiers/0, request/2, set_token/1, clear_token/0,
         report/0, report/1, reset/0]).
%% CALLS
-export([calls/1, calls/2]).
%% FLAME
-export([full_trace_flame/2]).
-export([flame_apply/1, flame_apply/2, flame_capture/2, flame_capture/3,
         flame_pid/1, flame_pid/2, flame_pid/3, cancel/0, flame_calibrate/0, flame_calibrate/1]).
-export([replay/1, replay/2, recorded_options/1]).
%% SAMPLE
-export([sample/1, sample/2]).

-export_type([start_opts/0, error/0, stats/0]).

-type start_opts() ::
        #{sink_path => file:filename() | default, % default: priv/kprof_sink
          sink_args => [string()],        % default: []
          call_timeout => non_neg_integer(), % ms, default: 5000
          tracer => ring | port}.         % default: ring
-type error() :: {error, timeout | not_running | {sink_down, term()} | term()}.
-type stats() :: #{frames := non_neg_integer(),
                   bytes := non_neg_integer(),
                   trace_events := non_neg_integer(),
                   commands := non_neg_integer(),
                   events := #{atom() => non_neg_integer()},
                   decode_errors := non_neg_integer(),
                   unknown := non_neg_integer(),
                   dropped := non_neg_integer(),
                   dropped_pids := non_neg_integer(),
                   dropped_mfas := non_neg_integer(),
                   dropped_names := non_neg_integer(),
                   oversized := non_neg_integer(),
                   empty := non_neg_integer(),
                   truncated := non_neg_integer(),
                   replies := non_neg_integer(),
                   mfas := non_neg_integer(),
                   pids := non_neg_integer(),
                   names := non_neg_integer(),
                   max_frame := non_neg_integer(),
                   pipe_size := non_neg_integer(),
                   atom() => term()}.

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%%% Starting and stopping

%% @doc Start kprof and its sink, with the options of the application
%% environment (those of the last {@link start/1}, or the defaults).
-spec start() -> ok | {error, term()}.
start() ->
    kprof_app:ensure_started().

%% @doc Start kprof and its sink. Options (a missing one takes its
%% default, not the value of an earlier call):
%% <ul>
%% <li>`sink_path': the `kprof_sink' binary (default `priv/kprof_sink');</li>
%% <li>`sink_args': its command-line arguments (default `[]');</li>
%% <li>`call_timeout': how long a `sink_*' call waits, in ms (default 5000);</li>
%% <li>`tracer': how trace events reach the sink: `ring' (default), the
%%     `kprof_tracer' NIF writing into shared memory, or `port', the VM's
%%     port tracer (dearer per event; the one left when the NIF is not
%%     built). Tiers and flame captures alike.</li>
%% </ul>
%% Returns `{error, {sink_not_built, Path}}' when the binary is missing (run
%% `make sink'), `{error, {sink_not_answering, Path, Why}}' when the program
%% at `sink_path' does not answer as kprof_sink does within `call_timeout'
%% (kprof is not left running), `{error, {sink_cannot_run, Path,
%% #{exit_status => Status, output => Output}}}' when it exited with a failure
%% first (`Output': its own words, such as the loader's for a missing shared
%% library), `{error, {bad_option, Key, Value}}' for
%% an invalid value, `{error, {unknown_options, [Key]}}' for keys it does
%% not take and `{error, already_started}' when kprof runs already
%% (stop it first).
-spec start(start_opts()) -> ok | {error, term()}.
start(Opts) ->
    with_opts(Opts, fun(O) ->
                            case validate_start_opts(O) of
                                {ok, Env} -> start_with(Env);
                                {error, _} = Error -> Error
                            end
                    end).

%% @doc Prints the calls a user needs first, one screen; `h(kprof)' and
%% `h(kprof, Function)' in the shell show every function's doc.
-spec help() -> ok.
help() ->
    Files = lists:join(" ", [kprof_opts:file_name(F, "*") || F <- kprof_opts:all_formats()]),
    #{ms := Ms, max := Max} = kprof_opts:defaults(calls),
    io:format(
      "kprof: tiered request profiling and flame graphs, aggregated off the VM.\n"
      "Flame graphs (files: ~ts):\n"
      "  kprof:flame_apply(fun() -> ... end, #{})        one call, and what it spawns\n"
      "  kprof:flame_apply(Fun, #{children => false})    this process alone\n"
      "  kprof:flame_capture({M, F, A}, N, #{})          the next N calls of an MFA\n"
      "  kprof:flame_pid(Pid, Ms, #{})                   a process for Ms milliseconds\n"
      "  kprof:cancel()                                  end running captures, with files\n"
      "  #{record => \"c.kprec\"} then kprof:replay(\"c.kprec\", #{})  a capture to a file, later\n"
      "  kprof:sample(5000, #{pid => Pid})               sampled (erl +JPperf map): kprof:help(sample)\n"
      "  options: output_directory, output_format, top => 10 (the top functions\n"
      "           by self time, printed and returned), ...: kprof:help(flame)\n"
      "Tiers (per request kind, time per tier):\n"
      "  kprof:start_tiers([{db, [{my_db, '_', '_'}]}, {http, [{my_http, '_', '_'}]}],\n"
      "                    #{entry => {my_http, handle, 1}, identity => {arg, 1}})\n"
      "  kprof:request(Id, Fun)      one request by hand\n"
      "  kprof:report()              the table; report(#{format => term}) as terms\n"
      "  kprof:stop_tiers()          tracing off, the report kept\n"
      "Call counts (every process; stops at ms or max calls, default ~b ms or ~b):\n"
      "  kprof:calls({M, F, A}, #{ms => 1000})          a table, {ok, [#{mfa, calls}]}\n"
      "  kprof:calls(M, #{max => 1000, time => true})   every function of M, with time\n"
      "Safety: every mode arms the guard (max_lag_ms, max_events, ...: kprof:help(guard)):\n"
      "  kprof:subscribe()           alerts as {kprof_alert, Kind, Info}\n"
      "  kprof:status()              what is armed, what aborted and why\n"
      "The sink: kprof:start(), kprof:stop(), kprof:sink_stats().\n"
      "Docs: h(kprof), h(kprof, flame_apply), README.md and doc/ in the source tree.\n",
      [Files, Ms, Max]).

%% @doc Prints the options of a mode, one a line: the key, its default, the
%% values it takes and what it does, from the option table
%% (include/ks_options.h, {@link kprof_opts:doc/1}). `guard': the limits
%% every mode takes, listed with each mode's own options too.
%%
%% ```
%% 1> kprof:help(calls).
%% kprof:calls/2 options (a map or a keyword list):
%%   ms (default 5000, 1.. or infinity): stop counting after this many ms (or at max calls)
%% ...
%% '''
%% Another mode: `{error, {unknown_mode, Mode}}'.
-spec help(tiers | flame | sample | calls | guard) -> ok | {error, {unknown_mode, term()}}.
help(Mode) when Mode =:= tiers; Mode =:= flame; Mode =:= sample; Mode =:= calls;
                Mode =:= guard ->
    Who = #{tiers => "kprof:start_tiers/2",
            flame => "kprof:flame_apply/2, flame_capture/3 and flame_pid/3",
            sample => "kprof:sample/2", calls => "kprof:calls/2",
            guard => "Every mode's (the guard's limits)"},
    io:format("~ts options (a map or a keyword list):~n", [maps:get(Mode, Who)]),
    lists:foreach(fun(Line) -> io:format("  ~ts~n", [Line]) end, kprof_opts:doc(Mode));
help(Mode) ->
    {error, {unknown_mode, Mode}}.

%% @doc Stop kprof: closes the port, which ends the sink and the tracing
%% that used it.
-spec stop() -> ok | {error, term()}.
stop() ->
    case application:stop(kprof) of
        ok -> ok;
        {error, {not_started, kprof}} -> ok;
        {error, _} = Error -> Error
    end.

%%% The sink

%% @doc The port to give as `{tracer, Port}' to `erlang:trace/3'. It
%% changes when the sink restarts.
-spec sink_port() -> port() | {error, not_running}.
sink_port() ->
    kprof_sink:port().

%% @doc `pong' when the sink answers.
-spec sink_ping() -> pong | error().
sink_ping() ->
    kprof_sink:command(ping).

%% @doc `{kprof_sink, Version, ProtocolVersion}'.
-spec sink_version() -> {kprof_sink, string(), integer()} | error().
sink_version() ->
    kprof_sink:command(version).

%% @doc The sink's counters since the last reset (see doc/internals-protocol.md):
%% frames and bytes read, events per kind, decode errors, table sizes,
%% `dropped' (trace messages lost at a table's cap) and, per table, the
%% new keys its cap refused: `dropped_pids', `dropped_mfas',
%% `dropped_names'.
-spec sink_stats() -> stats() | error().
sink_stats() ->
    kprof_sink:command(stats).

%% @doc The sink's memory in bytes, the OS process beside the VM that
%% `erlang:memory()' does not see: `rss' and `peak_rss' (resident now and at
%% its most, from the OS; `undefined' where it does not say), `flame_trees'
%% (the call-path trees of the `flame_captures' captures it holds, what each
%% one's `max_bytes' bounds) and `ring' (the tracer's shared ring, 0 when
%% none). See doc/internals-protocol.md.
%% ```
%% 1> kprof:sink_memory().
%% #{flame_captures => 0,flame_trees => 0,peak_rss => 2441216,ring => 0,
%%   rss => 2441216}
%% '''
-spec sink_memory() -> #{rss | peak_rss := non_neg_integer() | undefined,
                         flame_trees | flame_captures | ring := non_neg_integer()} | error().
sink_memory() ->
    kprof_sink:command(memory).

%% @doc Wait until the sink has processed every frame the port received
%% before this call; `N' is the number of frames processed so far.
-spec sink_sync() -> {synced, non_neg_integer()} | error().
sink_sync() ->
    kprof_sink:command(sync).

%% @doc Zero the sink's counters and call counts.
-spec sink_reset() -> ok | error().
sink_reset() ->
    kprof_sink:command(reset).

%% @doc `call' events per function since the last reset, most called
%% first.
-spec sink_calls() -> [{mfa(), non_neg_integer()}] | error().
sink_calls() ->
    case kprof_sink:command(calls) of
        Calls when is_list(Calls) -> sort_calls(Calls);
        Other -> Other
    end.

%%% SAFETY: alerts and status (kprof_guard watches every tracing mode)

%% @doc The caller gets `{kprof_alert, Kind, Info}' whenever kprof turns its
%% tracing off by itself: `overload' (messages too old in the sink, the port
%% queue or the node's memory too big), `limit' (`max_events', `rate',
%% `max_seconds'), `sink_down'. `Info' says what tripped, the measured figure
%% and the bound, and has a readable `message'.
-spec subscribe() -> ok | {error, not_running}.
subscribe() ->
    guard_call(fun kprof_guard:subscribe/0).

%% @doc Stops the alerts of {@link subscribe/0}.
-spec unsubscribe() -> ok | {error, not_running}.
unsubscribe() ->
    guard_call(fun kprof_guard:unsubscribe/0).

%% @doc What kprof is doing: the sink's health, what tracing is armed, the
%% limits in force and the last abort, e.g.
%% `#{sink => ok, armed => [tiers], aborted => #{kind => overload,
%% message => <<"overload (lag 1.8 s > 1.0 s)">>, at => "2026-...", took_us => 410}}';
%% `web': what the HTTP trigger allows and what it refused, by reason
%% (`#{allow_tracing => off, refused => #{off => 3, address => 0, ...},
%% traced => 0, deleted_files => 0, output_directory => "/root/.cache/kprof/http"}';
%% {@link kprof_web_gate:status/0});
%% `other_tracers', the processes another tracer kept from kprof when the
%% last mode started ({@link kprof_guard:other_tracers/0}), and
%% `other_sessions', those other trace sessions trace too (OTP 27 and later,
%% {@link kprof_sessions:others/0}); `tiers_overhead', while tiers run on
%% this node, what their tracing costs it (`undefined' else): `share' of
%% the CPU the VM and the sink spend, the sink's CPU and the VM's (the
%% events the sink counted times the cost of one, calibrated at the start:
%% `per_event_ns'), the `sample' in force and whether `max_overhead'
%% lowered it ({@link kprof_tiers_cost:info/1}).
-spec status() -> map() | {error, not_running}.
status() ->
    case guard_call(fun kprof_guard:status/0) of
        S when is_map(S) ->
            %% The sink's answer, or what its call raised, as a `catch'
            %% would give it: {'EXIT', Reason} (an error's with its stack).
            Health = fun(pong) -> ok;
                        (Err) -> Err
                     end,
            Sink = try kprof_sink:command(ping, 1000) of
                       Answer -> Health(Answer)
                   catch
                       throw:Thrown -> Health(Thrown);
                       error:Reason:Stack -> Health({'EXIT', {Reason, Stack}});
                       exit:Reason -> Health({'EXIT', Reason})
                   end,
            S#{sink => Sink, web => kprof_web_gate:status(), tiers_overhead => tiers_overhead()};
        Err ->
            Err
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% The tiers' estimate of their own cost on this node, while they run.
-spec tiers_overhead() -> map() | undefined.
tiers_overhead() ->
    try kprof_tiers:info() of
        #{active := true, overhead := Overhead} -> Overhead;
        _ -> undefined
    catch
        _:_ -> undefined
    end.

guard_call(F) ->
    case whereis(kprof_guard) of
        undefined -> {error, not_running};
        _ -> F()
    end.

-spec start_with([{atom(), term()}]) -> ok | {error, term()}.
start_with(Env) ->
    case is_running() of
        true ->
            {error, already_started};
        false ->
            %% Loading sets the env from kprof.app: load first.
            _ = application:load(kprof),
            [application:set_env(kprof, K, V) || {K, V} <- Env],
            kprof_app:ensure_started()
    end.

-spec is_running() -> boolean().
is_running() ->
    lists:keymember(kprof, 1, application:which_applications()).

-spec sort_calls([{mfa(), non_neg_integer()}]) -> [{mfa(), non_neg_integer()}].
sort_calls(Calls) ->
    lists:sort(fun({A, N}, {B, M}) -> {M, A} =< {N, B} end, Calls).

%%%%%%%%%%%%%%%%%%
%%% VALIDATION %%%
%%%%%%%%%%%%%%%%%%

-spec validate_start_opts(term()) -> {ok, [{atom(), term()}]} | {error, term()}.
validate_start_opts(Opts) when is_map(Opts) ->
    Known = maps:keys(default_opts()),
    case lists:sort([K || K <- maps:keys(Opts), not lists:member(K, Known)]) of
        [] -> validate(maps:to_list(maps:merge(default_opts(), Opts)), []);
        Unknown -> {error, {unknown_options, Unknown}}
    end;
validate_start_opts(Opts) ->
    {error, {bad_options, Opts}}.

%% What kprof.app.src sets.
-spec default_opts() -> #{atom() => term()}.
default_opts() ->
    #{sink_path => default, sink_args => [], call_timeout => 5000, tracer => ring}.

-spec validate([{term(), term()}], [{atom(), term()}]) ->
          {ok, [{atom(), term()}]} | {error, term()}.
validate([], Acc) ->
    {ok, lists:reverse(Acc)};
validate([{K, V} | Rest], Acc) ->
    case valid_opt(K, V) of
        true -> validate(Rest, [{K, V} | Acc]);
        false -> {error, {bad_option, K, V}}
    end.

-spec valid_opt(term(), term()) -> boolean().
valid_opt(sink_path, default) -> true;
valid_opt(sink_path, Path) -> is_filename(Path);
valid_opt(sink_args, Args) ->
    is_list(Args) andalso proper_length(Args) =/= error andalso lists:all(fun is_flat_string/1, Args);
valid_opt(call_timeout, T) -> is_integer(T) andalso T >= 0;
valid_opt(tracer, T) -> T =:= ring orelse T =:= port;
valid_opt(_, _) -> false.

-spec is_filename(term()) -> boolean().
is_filename(B) when is_binary(B) -> byte_size(B) > 0;
is_filename(L) -> is_flat_string(L) andalso L =/= [].

-spec is_flat_string(term()) -> boolean().
is_flat_string(L) when is_list(L) -> io_lib:printable_unicode_list(L);
is_flat_string(_) -> false.

%%%%%%%%%%%%%
%%% TIERS %%%
%%%%%%%%%%%%%
%%% Tiered request profiling: where the time of each kind of request goes,
%%% tier by tier. kprof_tiers has the guided session; doc/internals-tiers.md the
%%% contract with the sink.

%% @doc Start tiered request profiling: `Tiers' is
%% `[{TierName, [{M, F, Arity} | {M, F, '_'} | {M, '_', '_'}]}]' (at most
%% 32 tiers, no function in two). Requests are then what
%% {@link request/2} wraps, what {@link set_token/1} opens, or calls of the
%% `entry' functions. Options (see {@link kprof_tiers}): `sample',
%% `slow_ms', `slow_max', `window', `entry', `identity', `nodes' and the
%% sink's limits. Starts kprof if it is not running. Everything is
%% validated first: `{error, Reason}' names the culprit and nothing is
%% left started. While a flame capture runs: `{error, {busy, flame}}' (and
%% a flame capture while tiers run: `{error, {busy, tiers}}').
%% With `nodes': a node without kprof's code gives `{error,
%% {kprof_not_loaded, Node}}'; a node that cannot be reached is left out,
%% the others started: `{ok, #{dropped => [{Node, noconnection}]}}'.
%%
%% ```
%% 1> kprof:start_tiers([{http, [{shop_http, '_', '_'}]}, {db, [{shop_db, query, 3}]}], #{}).
%% ok
%% 2> kprof:start_tiers([{http, [{shop_htp, '_', '_'}]}], #{}).
%% {error,{unknown_module,http,shop_htp}}
%% '''
-spec start_tiers(kprof_tiers:tiers(), kprof_tiers:opts()) ->
          ok | {ok, #{dropped := [{node(), term()}]}} | {error, term()}.
start_tiers(Tiers, Opts) ->
    case proper_tiers(Tiers) of
        ok -> with_opts(Opts, fun(O) -> kprof_tiers_cluster:start(Tiers, O) end);
        Error -> Error
    end.

%% @doc Stop tiered profiling on every node it was started on; what was
%% recorded stays for {@link report/1}. `ok' once tracing is off (now, or
%% by an earlier stop or abort); `{error, {already_stopped, #{reason =>
%% kprof_tiers_restarted, undone => #{processes => N, patterns => M}}}}'
%% when `kprof_tiers' was killed while the tiers ran: its restarted
%% successor turned their tracing off, and says how much it found. A node
%% that cannot be reached: the others are stopped, then `{error,
%% {unreachable, [{Node, Reason}]}}'.
-spec stop_tiers() -> ok | {error, term()}.
stop_tiers() ->
    kprof_tiers_cluster:stop().

%% @doc Run `Fun' as one request of this identity (any term) and return
%% its result; an exception of `Fun' goes through with its stacktrace.
%% While tiers run, every tier function called for it, in this process or
%% in any process it sends messages to, is timed; without tiers, or when
%% the `sample' left it out, `Fun' just runs. `{error, {bad_fun, Fun}}'
%% when `Fun' is not a fun of no arguments (nothing runs).
-spec request(term(), fun(() -> Result)) -> Result | {error, {bad_fun, term()}}.
request(Identity, Fun) ->
    kprof_tiers:request(Identity, Fun).

%% @doc Open a request of this identity in the calling process, for entry
%% points that cannot wrap a fun; {@link clear_token/0} ends it. A request
%% still open is ended first.
-spec set_token(term()) -> ok.
set_token(Identity) ->
    ok = clear_token(),
    case kprof_tiers:enter(Identity) of
        untraced -> ok;
        Traced -> put('$kprof_request', Traced), ok
    end.

%% @doc End the request {@link set_token/1} opened (nothing if none).
-spec clear_token() -> ok.
clear_token() ->
    case erase('$kprof_request') of
        undefined -> ok;
        Traced -> kprof_tiers:leave(Traced)
    end.

%% @equiv report(#{})
%% @doc Print the tier table of every node the tiers run on.
-spec report() -> ok | {error, term()}.
report() ->
    report(#{}).

%% @doc The tier report. Options: `format' (`text': print the table and
%% return `ok'; `string': `{ok, String}', that text as a list of characters,
%% for scripts and `bin/myapp eval' of a release, which shows the value and not
%% what the node prints; `term': `{ok, Map}'; `json': `{ok, Binary}'), `time'
%% (`self' or `inclusive' time per tier in the table), `sort' (the rows'
%% order, largest first: `requests', the default, `wall', `other', a
%% tier's name, or `{Column, p99}' and the other statistics; `identity'),
%% `nodes' (default: those of {@link start_tiers/2}), `limit' (identities
%% in the table, 50), `names' (`elixir': the full-trace table's functions
%% as Elixir names them, `Enum.sum/1').
%% See {@link kprof_report} for the map. Returns within 6 s (and the time
%% to build the report) whatever the sinks do: a sink that does not answer
%% within 2 s, or died, gives the rows of the last poll (at least once a
%% second while tracing is on), flagged `incomplete' in the map and
%% `INCOMPLETE: ...' in the text's header.
%% A node that does not reply (down, without kprof) is named in `missing'
%% (`[{Node, Reason}]'; `MISSING: ...' in the header), the others merged.
-spec report(kprof_tiers:report_opts()) -> ok | {ok, term()} | {error, term()}.
report(Opts) ->
    with_opts(Opts, fun(O) -> kprof_tiers_cluster:report(O) end).

%% @doc A flame graph per identity of the tiers' full trace (option
%% `full_trace' of {@link start_tiers/2}): `Identity' or `all' (every
%% identity full-traced so far), written by this node's sink from the
%% identity's call-path tree with the flame writers. Returns `{ok,
%% [{Identity, Files}]}'. Options: `output_format' (one of
%% `kprof_opts:formats()', a list, or `all', the default:
%% `kprof_opts:all_formats()'), `output_directory'
%% (default "."), `open => speedscope'; any other key is `{error,
%% {unknown_options, [K]}}', a bad value `{error, {bad_option, K, V}}'.
%% `{error, {no_full_trace, Identity}}' when the identity has no full-trace
%% data, `{error, full_trace_off}' when the
%% tiers run without full trace.
%%
%% ```
%% 1> kprof:start_tiers(Tiers, #{full_trace => {"GET", "/report"}}).
%% 2> kprof:full_trace_flame({"GET", "/report"}, #{output_format => svg}).
%% {ok,[{{"GET","/report"},["/home/me/kprof-full-3f2a9c0d17e4-20250101-120000.svg"]}]}
%% '''
-spec full_trace_flame(term(), map()) -> {ok, [{term(), [file:filename()]}]} | {error, term()}.
full_trace_flame(Identity, Opts) ->
    with_opts(Opts, fun(O) -> kprof_tiers:full_trace_flame(Identity, O) end).

%% @doc Forget what the tiers recorded, on every node; tracing goes on.
-spec reset() -> ok | {error, term()}.
reset() ->
    kprof_tiers_cluster:reset().

%%%%%%%%%%%%%
%%% CALLS %%%
%%%%%%%%%%%%%
%%% Call counting, recon_trace style, through the ring: kprof_calls has the
%%% guided session.

%% @equiv calls(Spec, #{})
-spec calls(kprof_calls:spec()) -> {ok, [kprof_calls:row()]} | {error, term()}.
calls(Spec) ->
    calls(Spec, #{}).

%% @doc Count the calls of `Spec' (`{M, F, A}' with `'_'' for `F' or `A',
%% `M' alone, or a list of those) in every process, for `ms' milliseconds or
%% until `max' calls in all (defaults: 5000 ms, 100,000 calls), print
%% a table of the `top' (20) most called functions and return `{ok, Rows}',
%% `Rows = [#{mfa := MFA, calls := N}]' (with `time => true', `time_us' and
%% `time_calls' too), most called first, `[]' when nothing was called. The
%% table's header says what stopped it (`ms', `max', or an abort by the
%% guard). `{error, {busy, Mode}}' while tiers or a flame capture run,
%% `{error, {bad_spec, X}}', `{error, {no_functions, Spec}}', and the errors
%% of options, with nothing traced. See {@link kprof_calls}.
%%
%% ```
%% 1> kprof:calls({ets, lookup, 2}, #{ms => 500}).
%% kprof calls: 1 functions, 243 calls in 0.501 s (stopped: ms)
%%     calls      %  function
%%       243  100.0  ets:lookup/2
%% {ok,[#{calls => 243,mfa => {ets,lookup,2}}]}
%% '''
-spec calls(kprof_calls:spec(), kprof_calls:opts()) -> {ok, [kprof_calls:row()]} | {error, term()}.
calls(Spec, Opts) ->
    with_opts(Opts, fun(O) ->
                            case kprof_calls:run(Spec, O) of
                                {ok, Rows, _Summary} -> {ok, Rows};
                                {error, _} = Error -> Error
                            end
                    end).

%%%%%%%%%%%%%
%%% FLAME %%%
%%%%%%%%%%%%%
%%% Flame graphs: per-process call stacks built by the sink from call,
%%% return_to, scheduling and GC events, time credited to the stack that
%%% ran, written by the sink as folded stacks, perf script text, speedscope
%%% JSON, an interactive SVG and callgrind. See kprof_flame and doc/flame.md.
%%%
%%% ```
%%% 1> {ok, Sum, Files} = kprof:flame_apply(fun() -> lists:sum(lists:seq(1, 1000)) end,
%%% 1>                                         #{output_directory => "/tmp/fl"}).
%%% {ok,500500,
%%%     ["/tmp/fl/kprof-apply-20261128-160123-131.folded",
%%%      "/tmp/fl/kprof-apply-20261128-160123-131.perf",
%%%      "/tmp/fl/kprof-apply-20261128-160123-131.speedscope.json",
%%%      "/tmp/fl/kprof-apply-20261128-160123-131.svg",
%%%      "/tmp/fl/callgrind.out.kprof-apply-20261128-160123-131"]}
%%% 2> Worker = spawn(fun Loop() -> _ = lists:reverse(lists:seq(1, 1000)), timer:sleep(10), Loop() end).
%%% <0.139.0>
%%% 3> kprof:flame_capture({lists, seq, 2}, 5, #{output_format => svg,
%%% 3>                                            output_directory => "/tmp/fl"}).
%%% {ok,["/tmp/fl/kprof-capture-20261128-160123-179.svg"]}
%%% 4> kprof:flame_pid(Worker, 2000, #{sleep => false, output_format => folded,
%%% 4>                                 output_directory => "/tmp/fl"}).
%%% {ok,["/tmp/fl/kprof-pid-20261128-160125-211.folded"]}
%%% '''
%%% Options (all optional): kprof_flame's module doc (`h(kprof_flame)')
%%% lists them, generated from the option table; doc/flame.md says more.
%%% `progress' lines can be ended with {@link cancel/0}, files and all.
%%% `record' writes the event stream to a file too (`max_record_bytes',
%%% `record_rotate'): see "Record and replay" above and {@link replay/2}.
%%% `top => N' gives the N functions with the most self time (calls, self,
%%% inclusive, %), printed like tprof's table and returned as terms after
%%% the files, `{ok, Result, Files, Top}' or `{ok, Files, Top}'
%%% (`kprof_top'); the table is exact whatever limit cut the graph.
%%% A process's root frame is `name(<0.N.S>)', else `M:F/A(<0.N.S>)' (its
%%% initial call as proc_lib records it, its spawn MFA, or the fun it runs).
%%% A spawned process's wait before it first runs is its `WAITING_TO_RUN'
%%% frame (dropped with `sleep => false', like SLEEP): every format shows
%%% the same total per process.
%%% No events gives `{error, no_events}' and a logged hint; nothing is
%%% ever written silently empty.

%% @equiv flame_apply(Fun, #{})
-spec flame_apply(fun(() -> term()) | {module(), atom(), [term()]}) ->
          {ok, term(), [file:filename_all()]} | {error, term()}.
flame_apply(Fun) ->
    flame_apply(Fun, #{}).

%% @doc Run `Fun()' (or `apply(M, F, Args)') in the calling process,
%% traced from just before the call to its return; `{ok, Result, Files}'.
%% An exception of the function is raised again after the files are
%% written. It follows the processes the call spawns, as eprof and fprof do
%% (`children => false': the caller alone).
%% `{error, {no_such_function, {M, F, Arity}}}' when `M' does not export
%% `F/Arity' (nothing is traced).
-spec flame_apply(fun(() -> term()) | {module(), atom(), [term()]}, kprof_flame:opts()) ->
          {ok, term(), [file:filename_all()]} | {ok, term(), [file:filename_all()], [kprof_top:row()]}
          | {error, term()}.
flame_apply({M, F, Args} = MFArgs, Opts) when is_atom(M), is_atom(F), is_list(Args) ->
    case proper_length(Args) of
        error ->
            {error, {bad_fun, MFArgs}};
        Arity ->
            case is_exported(M, F, Arity) of
                true -> with_opts(Opts, fun(O) -> kprof_flame:apply(MFArgs, O) end);
                false -> {error, {no_such_function, {M, F, Arity}}}
            end
    end;
flame_apply(Fun, Opts) ->
    with_opts(Opts, fun(O) -> kprof_flame:apply(Fun, O) end).

%% @equiv flame_capture(MFA, NCalls, #{})
-spec flame_capture(mfa(), pos_integer()) -> {ok, [file:filename_all()]} | {error, term()}.
flame_capture(MFA, NCalls) ->
    flame_capture(MFA, NCalls, #{}).

%% @doc Trace the next `NCalls' calls of `{M, F, Arity}' in whatever
%% processes make them, from the call to its return, without changing any
%% code; returns when they are done, or `{error, timeout}' after the
%% `timeout' option (30 s).
-spec flame_capture(mfa(), pos_integer(), kprof_flame:opts()) ->
          kprof_flame:written() | {error, term()}.
flame_capture(MFA, NCalls, Opts) ->
    with_opts(Opts, fun(O) -> kprof_flame:capture(MFA, NCalls, O) end).

%% @equiv flame_pid(Pids, 3000, #{})
-spec flame_pid(pid() | [pid()]) -> {ok, [file:filename_all()]} | {error, term()}.
flame_pid(Pids) ->
    flame_pid(Pids, default, #{}).

%% @equiv flame_pid(Pids, Millis, #{})
-spec flame_pid(pid() | [pid()], non_neg_integer()) -> {ok, [file:filename_all()]} | {error, term()}.
flame_pid(Pids, Millis) ->
    flame_pid(Pids, Millis, #{}).

%% @doc Trace running processes for `Millis' ms (at most 60000; the
%% default of flame_pid/1 is 3000).
-spec flame_pid(pid() | [pid()], non_neg_integer() | default, kprof_flame:opts()) ->
          kprof_flame:written() | {error, term()}.
flame_pid(Pids, Millis, Opts) when is_list(Pids) ->
    case proper_length(Pids) of
        error -> {error, {badarg, Pids}};
        _ -> with_opts(Opts, fun(O) -> kprof_flame:pid(Pids, Millis, O) end)
    end;
flame_pid(Pids, Millis, Opts) ->
    with_opts(Opts, fun(O) -> kprof_flame:pid(Pids, Millis, O) end).

%% @equiv replay(Path, #{})
-spec replay(file:filename_all() | [file:filename_all()]) ->
          kprof_flame:written() | {error, term()}.
replay(Path) ->
    replay(Path, #{}).

%% @doc Write the files of a capture recorded with `record => Path', from the
%% file, as the live capture would have written them with the same options:
%% `{ok, Files}', `{ok, Files, Top}' with `top => N', `{ok, Files, Summary}'
%% with `info => true'. `Path' is one file, or a rotated recording's files
%% oldest first (`["c.kprec.2", "c.kprec.1", "c.kprec"]'). It starts kprof's
%% sink if needed and runs there; the traced code need not exist on this
%% node. A file that ends early or is corrupt gives
%% `{error, {truncated, Why, Files}}' with the files of what was read
%% before; one that cannot be read at all
%% `{error, {replay_failed, Path, Why}}'. Options (the table's, `name'
%% defaults to the file's name; doc/record-replay.md):
%% <!-- BEGIN option-docs replay flame: generated by `make option-docs' -->
%% <ul>
%% <li>`output_directory' (default `"."'; term): where the files go</li>
%% <li>`name' (no default; term): the files' base name (default kprof-Mode-Time-Id)</li>
%% <li>`output_format' (default `all'; term): a format, a list of them, or all</li>
%% <li>`group' (default the recorded value; pid | name | initial_call | all): processes merged at the root (default initial_call with children => true, else pid)</li>
%% <li>`fold_recursion' (default the recorded value; boolean): direct recursion f;f;f written as one f</li>
%% <li>`names' (default the recorded value; erlang | elixir): functions named lists:seq/2, or Enum.sum/1 and :lists.seq/2, in the files and the top table</li>
%% <li>`top' (default the recorded value; integer 0..100000): print the N functions with the most self time after the capture, and return them</li>
%% <li>`max_bytes' (default the recorded value; integer 65536..1099511627776): memory of the call-path tree; paths past it go to OVER_BUDGET frames</li>
%% <li>`sleep' (default the recorded value; boolean): SLEEP frames</li>
%% <li>`info' (default `false'; boolean): return the capture's summary (kprof_flame_summary) after its files, the top table in it</li>
%% </ul>
%% <!-- END option-docs replay flame -->
-spec replay(file:filename_all() | [file:filename_all()], kprof_flame:opts()) ->
          kprof_flame:written() | {error, term()}.
replay(Path, Opts) ->
    with_opts(Opts, fun(O) -> kprof_flame_replay:replay(Path, O) end).

%% @doc The options a recording (`record => Path') was made with, read from
%% its header without replaying it: `{ok, #{sleep => true, top => 10,
%% group => pid, names => erlang, trigger => {M, F, A} | undefined, ...}}',
%% every key a recording keeps (doc/reference.md, "A recording's header"),
%% the defaults of a {@link replay/2}. A file that is not there or not a
%% recording: `{error, {replay_failed, Path, Why}}'.
-spec recorded_options(file:filename_all()) -> {ok, map()} | {error, term()}.
recorded_options(Path) ->
    kprof_flame_replay:recorded_options(Path).

%% @equiv flame_calibrate(#{})
-spec flame_calibrate() -> {ok, map()} | {error, term()}.
flame_calibrate() ->
    flame_calibrate(#{}).

%% @doc Measure again what one trace event costs a traced process here, for
%% captures with options `Opts' (`callers' is the one that matters), and keep
%% it for the next captures: `{ok, #{per_event_ns := Ns, rounds := [...],
%% tracer := ring | port, pattern := true | callers}}'. Captures measure it
%% themselves the first time (`correct => true', the default) and take it off
%% every time they report ({@link kprof_flame_calib}); run this when the
%% machine's load has changed much.
-spec flame_calibrate(kprof_flame:opts()) -> {ok, map()} | {error, term()}.
flame_calibrate(Opts) ->
    with_opts(Opts, fun(O) -> kprof_flame_calib:calibrate(O) end).

%% @doc End every running flame capture now, with its files: tracing
%% comes off at once, and each capture's caller gets
%% `{error, {aborted, cancelled, Files}}' (`flame_apply':
%% `{error, {aborted, cancelled, Result, Files}}' once its function
%% returns; what it did after the cancel is not in the files).
%% `{ok, N}': N captures were running; `{error, not_running}' without
%% kprof. From another shell (Ctrl-G, `s', `c') or process while the
%% capture's caller waits.
-spec cancel() -> {ok, non_neg_integer()} | {error, term()}.
cancel() ->
    case kprof_flame_srv:cancel() of
        N when is_integer(N) -> {ok, N};
        {error, _} = Error -> Error
    end.

%%%%%%%%%%%%%%
%%% SAMPLE %%%
%%%%%%%%%%%%%%
%%% Sampled flame graphs of the whole node (or some of its processes):
%%% the sink samples the VM's scheduler threads with perf_event_open and
%%% names Erlang frames from the JIT's perf map, C frames from beam.smp's
%%% symbols and the process from the VM's memory. The node must run with
%%% `+JPperf map'. See kprof_sample and doc/sampling.md.

%% @equiv sample(Ms, #{})
-spec sample(pos_integer()) -> kprof_flame:written() | {error, term()}.
sample(Ms) ->
    sample(Ms, #{}).

%% @doc Sample every scheduler thread of this node for `Ms' milliseconds
%% (at most 600000) at `frequency' samples a second of each thread's CPU
%% time (doc/sampling.md says what each rate costs); write the same files
%% as a flame capture (`{ok, Files}', `{ok, Files, Top}' with `top',
%% `{ok, Files, Summary}' with `info'). `pid => Pid | [Pid]' keeps those
%% processes' samples only. Refusals: `{error, {needs_emulator_flag,
%% "+JPperf map"}}', `{error, {not_supported, emu}}', `{error,
%% {perf_event_open, eacces, Hint}}' (the kernel's permissions: `Hint' says
%% which to change), `{error, {busy, Mode}}' (another mode runs). Options:
%% kprof_sample's module doc (`h(kprof_sample)').
-spec sample(pos_integer(), kprof_sample:opts()) -> kprof_flame:written() | {error, term()}.
sample(Ms, Opts) ->
    with_opts(Opts, fun(O) -> kprof_sample:run(Ms, O) end).

%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% VALIDATION: the shape of arguments %%%
%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%
%%% kprof_tiers and kprof_flame check every option's meaning, but walk
%%% lists with lists:all/2 and lists:usort/1, which raise function_clause
%%% on an improper list such as `[svg | x]'. Checked here first, so a
%%% caller's mistake is `{error, _}', never an exception in the shell.

-spec checked(ok | {error, term()}, fun(() -> Result)) -> Result | {error, term()}.
checked(ok, Fun) -> Fun();
checked({error, _} = Error, _Fun) -> Error.

%% Options are a map or a keyword list (`[{Key, Value}]', as Elixir's
%% `[slow_ms: 5]'), the first of a repeated key winning as in Keyword.get/2;
%% Fun gets them as a map. Anything else goes to Fun as it is, for the mode
%% to refuse as `{bad_options, Opts}'.
-spec with_opts(term(), fun((term()) -> Result)) -> Result | {error, term()}.
with_opts(Opts, Fun) when is_list(Opts) ->
    case proper_length(Opts) =/= error andalso lists:all(fun is_keyword/1, Opts) of
        true -> with_opts(maps:from_list(lists:reverse(Opts)), Fun);
        false -> {error, {bad_options, Opts}}
    end;
with_opts(Opts, Fun) ->
    checked(proper_opts(Opts), fun() -> Fun(Opts) end).

is_keyword({K, _}) -> is_atom(K);
is_keyword(_) -> false.

%% An option whose value is an improper list is `{bad_option, K, V}'. A
%% map's other mistakes are for the module that knows its options.
-spec proper_opts(term()) -> ok | {error, {bad_option, term(), term()}}.
proper_opts(Opts) when is_map(Opts) ->
    case [{K, V} || {K, V} <- lists:sort(maps:to_list(Opts)),
                    is_list(V), proper_length(V) =:= error] of
        [] -> ok;
        [{K, V} | _] -> {error, {bad_option, K, V}}
    end;
proper_opts(_Opts) ->
    ok.

%% The tier list and each tier's list of functions.
-spec proper_tiers(term()) -> ok | {error, {bad_tiers, term()} | {bad_tier, term()}}.
proper_tiers(Tiers) when is_list(Tiers) ->
    case proper_length(Tiers) of
        error ->
            {error, {bad_tiers, Tiers}};
        _ ->
            case [T || {_, Specs} = T <- Tiers, is_list(Specs), proper_length(Specs) =:= error] of
                [] -> ok;
                [T | _] -> {error, {bad_tier, T}}
            end
    end;
proper_tiers(_Tiers) ->
    ok.

-spec proper_length(list()) -> non_neg_integer() | error.
proper_length(L) ->
    try length(L) catch error:badarg -> error end.

-spec is_exported(module(), atom(), arity()) -> boolean().
is_exported(M, F, Arity) ->
    _ = code:ensure_loaded(M),
    erlang:function_exported(M, F, Arity).
