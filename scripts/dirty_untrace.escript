#!/usr/bin/env escript
%% -*- erlang -*-
%%! +SDio 4
%% scripts/dirty_untrace.escript all|each [Rounds]
%% The race of issues 6448 and 5984 in OTP's tracker, which crashes OTP before
%% 25.3 (Debian 12 ships 25.2.3): a process traced with `running' or
%% `procs' is scheduled in on a dirty scheduler while its tracer is being
%% taken away, and the VM dereferences the tracer it no longer has
%% (lookup_tracer_nif). Eight processes loop on raw file reads and writes
%% (dirty I/O in the process itself); Rounds times (default 20000), every
%% process gets `running' and `procs' to a tracer process for 1 ms, then
%% loses them:
%%   all   erlang:trace(all, false, Flags), as tools commonly do;
%%   each  kprof's own way, kprof_trace_session:process/4 on the legacy API:
%%         one process at a time (a process is changed only while it does
%%         not run); erlang/ebin is put on the path (run `make` first).
%% Prints a line every 1000 rounds and "survived" at the end; a crash ends
%% the VM (exit status 139, SIGSEGV). Not part of make test: a crash is the
%% VM's bug, and whether one comes in N rounds is chance.
-mode(compile).

main([Mode]) ->
    main([Mode, "20000"]);
main([Mode0, Rounds0]) when Mode0 =:= "all"; Mode0 =:= "each" ->
    Mode = list_to_atom(Mode0),
    true = code:add_patha(filename:join([filename:dirname(escript:script_name()), "..",
                                         "erlang", "ebin"])),
    Rounds = list_to_integer(Rounds0),
    Dir = filename:join("/tmp", "dirty_untrace." ++ os:getpid()),
    ok = file:make_dir(Dir),
    File = filename:join(Dir, "f"),
    ok = file:write_file(File, binary:copy(<<"x">>, 4096)),
    _ = [spawn(fun() -> io_loop(File, filename:join(Dir, integer_to_list(I))) end)
         || I <- lists:seq(1, 8)],
    Tracer = spawn(fun Drop() -> receive _ -> Drop() end end),
    io:format("~s: OTP ~s (erts ~s), ~b dirty I/O schedulers, ~b rounds~n",
              [Mode, erlang:system_info(otp_release), erlang:system_info(version),
               erlang:system_info(dirty_io_schedulers), Rounds]),
    T0 = erlang:monotonic_time(millisecond),
    rounds(Mode, 0, Rounds, Tracer),
    io:format("~s: survived ~b rounds in ~b ms~n",
              [Mode, Rounds, erlang:monotonic_time(millisecond) - T0]),
    _ = os:cmd("rm -rf " ++ Dir),
    halt(0);
main(_) ->
    io:format(standard_error, "usage: dirty_untrace.escript all|each [Rounds]~n", []),
    halt(64).

io_loop(File, Out) ->
    {ok, _} = prim_file:read_file(File),
    ok = file:write_file(Out, <<"y">>, [raw]),
    io_loop(File, Out).

rounds(_Mode, N, N, _Tracer) ->
    ok;
rounds(Mode, I, N, Tracer) ->
    _ = erlang:trace(all, true, [running, procs, {tracer, Tracer}]),
    receive after 1 -> ok end,
    _ = off(Mode, [running, procs]),
    _ = I rem 1000 =:= 0 andalso io:format("round ~b~n", [I]),
    rounds(Mode, I + 1, N, Tracer).

off(all, Flags) ->
    erlang:trace(all, false, Flags);
off(each, Flags) ->
    kprof_trace_session:process({legacy, undefined}, all, false, Flags).
