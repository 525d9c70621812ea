%%% EUnit: tracing turned on and off, again and again, on processes that run
%%% on dirty schedulers, and captures of processes that spend their window
%%% there.
%%%
%%% erlang/otp issues 6448 and 5984: before OTP 25.3 the VM could crash in
%%% lookup_tracer_nif when a process traced through a tracer NIF (`running'
%%% or `procs') was scheduled in on a dirty scheduler while its tracing was
%%% being turned off. File I/O runs on dirty I/O schedulers, and a flame
%%% capture turns tracing off at every end. The stress runs in a peer node
%%% (a crash fails the test instead of killing EUnit's node): processes
%%% loop on file:read_file/1 (the file server does the dirty I/O), raw file
%%% reads and writes (`prim_file:read_file/1', `file:write_file/3' with
%%% `raw': dirty I/O in the process itself), and a dirty CPU BIF
%%% (`erts_debug:dirty_cpu/2'); 1,000 flame_pid captures in a row trace them
%%% with kprof's default flags (`running' among them), the file server too,
%%% and the node must stay up.
%%%
%%% That the race is real here, and that kprof's way past it holds, is
%%% scripts/dirty_untrace.escript's (not run by make test: a crash is the
%%% VM's, and chance): on OTP 25.2.3, `erlang:trace(all, false, Flags)'
%%% while eight processes do raw file I/O crashed the VM within 130 rounds
%%% in 9 runs of 9; untracing one process at a time, as kprof does on the
%%% legacy API (kprof_trace_session:process/4), survived 20,000 rounds in 4
%%% runs of 4. OTP 27.3.4.1 and 29.1.2 survive 20,000 rounds of `all'.
%%%
%%% The same stress with rings of 64 KiB, which these processes overflow in
%%% most captures: the guard aborts those, each with the files of what came
%%% before the abort. The ring's drops in one capture once aborted a later
%%% one (the sink's alert, held back by its one-a-second gap, came then),
%%% sometimes before its first event: no files at all.
-module(kprof_dirty_tests).

-include_lib("eunit/include/eunit.hrl").

%% Run in the peer.
-export([stress/2, file_loop/1, dirty_cpu_loop/0, in_dirty/1]).

-define(CAPTURES, 1000).
%% With small rings: enough captures for several of the sink's alert gaps
%% (a second each).
-define(SMALL_RING_CAPTURES, 300).

%%%%%%%%%%%%%
%%% TESTS %%%
%%%%%%%%%%%%%

stress_test_() ->
    [{timeout, 900, fun() -> stress_in_peer(?CAPTURES, [], fits) end},
     {"rings of 64 KiB: every capture aborted has its files",
      {timeout, 900, fun() -> stress_in_peer(?SMALL_RING_CAPTURES,
                                             ["-kprof", "ring_bytes", "65536"],
                                             overflows) end}}].

%% A process inside one dirty call (I/O, then CPU) for the whole window of
%% a flame_pid: the capture shows the function it is in, with the window's
%% time, where it had no event to show (no_events) before.
dirty_window_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Dir) ->
             [{atom_to_list(Kind) ++ ": a capture inside one dirty call shows it",
               {timeout, 60, fun() -> dirty_window(Kind, Dir) end}}
              || Kind <- [dirty_io, dirty_cpu]]
     end}.

%% Ring: `overflows' when the rings are too small for the loops' events,
%% which some captures' aborts must then show.
stress_in_peer(Captures, Args, Ring) ->
    {ok, Peer, Node} = peer:start_link(#{connection => standard_io,
                                          args => ["+SDio", "4" | Args ++ peer_args()]}),
    try
        Dir = kprof_test_util:tmp_dir("kprof-dirty"),
        T0 = erlang:monotonic_time(millisecond),
        Result = peer:call(Peer, ?MODULE, stress, [Dir, Captures], 850000),
        Ms = erlang:monotonic_time(millisecond) - T0,
        #{ok := Ok, aborted := Aborted, no_events := NoEvents, errors := Errors,
          alive := Alive} = Result,
        ?debugFmt("OTP ~s, ~p ~p: ~b flame_pid captures of processes on dirty schedulers "
                  "in ~b ms: ~b with files, ~b aborted by the guard with files (~p), "
                  "no_events ~p, errors ~p; node alive: ~p",
                  [erlang:system_info(otp_release), Node, Args, Captures, Ms, Ok,
                   length(Aborted), lists:usort(Aborted), NoEvents, Errors, Alive]),
        ?assert(Alive),
        %% Every capture has its files: its own end, or the guard's abort (a
        %% loaded machine's sink may fall behind: overload), never no_events
        %% (the processes' states at the start are events: see the window test).
        ?assertEqual([], NoEvents),
        ?assertEqual([], Errors),
        ?assertEqual(Captures, Ok + length(Aborted)),
        ?assert(Ring =:= fits orelse lists:member(overload, Aborted)),
        _ = file:del_dir_r(Dir)
    after
        _ = kprof_test_util:caught(fun() -> peer:stop(Peer) end)
    end.

%% In the peer: the loops, then the captures, one after the other; the
%% loops still running at the end say the node and they lived through it.
stress(Dir, N) ->
    ok = kprof:start(),
    logger:set_primary_config(level, error),
    Files = [filename:join(Dir, "f" ++ integer_to_list(I)) || I <- lists:seq(1, 4)],
    [ok = file:write_file(F, binary:copy(<<"x">>, 65536)) || F <- Files],
    Loops = [spawn(?MODULE, file_loop, [F]) || F <- Files]
        ++ [spawn(?MODULE, dirty_cpu_loop, []) || _ <- [1, 2]],
    Traced = [whereis(file_server_2) | Loops],
    Out = filename:join(Dir, "out"),
    Results = [capture(Traced, Out, I) || I <- lists:seq(1, N)],
    Alive = lists:all(fun erlang:is_process_alive/1, Loops),
    [exit(L, kill) || L <- Loops],
    ok = kprof:stop(),
    #{ok => length([x || ok <- Results]), aborted => [K || {aborted, K} <- Results],
      no_events => [S || {no_events, S} <- Results],
      errors => lists:usort([E || {error, E} <- Results]), alive => Alive}.

%% One capture of 1 to 5 ms; its files go at once (a thousand of them). A
%% capture with no event says what the processes were doing at its start.
capture(Pids, Out, I) ->
    States = kprof_flame_trace:start_states(Pids),
    case kprof:flame_pid(Pids, 1 + I rem 5, #{output_directory => Out,
                                               output_format => folded, progress => false}) of
        {ok, Files} -> _ = [file:delete(F) || F <- Files], ok;
        {error, {aborted, Kind, [_ | _] = Files}} -> _ = [file:delete(F) || F <- Files],
                                                     {aborted, Kind};
        {error, no_events} -> {no_events, States};
        %% Aborted with no files: the guard's alert says what it saw.
        {error, {aborted, Kind, []}} -> {error, {aborted, Kind, [],
                                                 maps:get(aborted, kprof:status(), undefined)}};
        {error, Other} -> {error, Other}
    end.

file_loop(F) ->
    {ok, Bin} = file:read_file(F),
    {ok, Bin} = prim_file:read_file(F),
    ok = file:write_file(F, Bin, [raw]),
    file_loop(F).

dirty_cpu_loop() ->
    ok = erts_debug:dirty_cpu(wait, 1),
    dirty_cpu_loop().

%% One call of Kind that lasts until told to stop: a dirty I/O or dirty CPU
%% wait of a second at a time, never returning to Erlang code in between but
%% to loop.
in_dirty(Kind) ->
    ok = erts_debug:Kind(wait, 1000),
    receive stop -> ok after 0 -> in_dirty(Kind) end.

dirty_window(Kind, Dir) ->
    P = spawn(?MODULE, in_dirty, [Kind]),
    ok = kprof_test_util:wait_until(fun() -> in_call(P, Kind) end, 5000),
    {ok, [File]} = kprof:flame_pid(P, 40, #{output_directory => Dir, output_format => folded,
                                            progress => false}),
    P ! stop,
    {ok, Bin} = file:read_file(File),
    Lines = [L || L <- binary:split(Bin, <<"\n">>, [global]), L =/= <<>>],
    Name = iolist_to_binary(io_lib:format("erts_debug:~s/2", [Kind])),
    Us = lists:sum([binary_to_integer(lists:last(binary:split(L, <<" ">>, [global])))
                    || L <- Lines, binary:match(L, Name) =/= nomatch]),
    ?debugFmt("~p: ~s in the capture for ~b us of 40 ms", [Kind, Name, Us]),
    %% Most of the window: tracing was on for all of it but its start and
    %% end, and the process was in the call for all of it.
    ?assert(Us >= 20000).

in_call(P, Kind) ->
    erlang:process_info(P, current_function) =:= {current_function, {erts_debug, Kind, 2}}.

%%%%%%%%%%%%%%%
%%% HELPERS %%%
%%%%%%%%%%%%%%%

setup() ->
    kprof_test_util:start_quiet("kprof-dirty").

cleanup(Dir) ->
    kprof_test_util:stop_quiet(Dir).

peer_args() ->
    kprof_test_util:peer_args(?MODULE).
