#!/usr/bin/env escript
%% -*- erlang -*-
%%! -pa erlang/ebin +S 1
%% fuzz/otp_ring.escript RingRecord Out: the ring records the kprof_tracer
%% NIF writes on this OTP (its atoms' encoding, its pids' external format),
%% as a seed of fuzz_ring: RingRecord (fuzz/ring_record.c) creates a ring
%% and writes its records to Out; this VM attaches the NIF to it and traces
%% work that makes every kind of record: calls with their caller (the flame
%% captures' stacks), calls of a `true' pattern, a seq_trace label and a
%% payload (the tiers' requests, and their markers' records written by the
%% process itself), return_to, a meta pattern's return_from and
%% exception_from, scheduling, spawn, exit, register, garbage collections,
%% and function names outside Latin-1. Run from the top of the tree (`make
%% fuzz-otp-corpus').
-mode(compile).

main([Tool, Out]) ->
    kprof_tracer:available() orelse fail("the kprof_tracer NIF did not load (make nif)"),
    Port = open_port({spawn_executable, Tool}, [{args, [Out]}, {line, 256}, binary]),
    Name = receive {Port, {data, {eol, N}}} -> N after 10000 -> fail("no ring from " ++ Tool) end,
    ok = kprof_tracer:attach(Name, 1),
    Unicode = unicode_module(),
    work(Unicode),
    ok = kprof_tracer:detach(),
    true = port_command(Port, <<"dump\n">>),
    receive
        {Port, {data, {eol, <<"wrote ", Bytes/binary>>}}} ->
            io:format("otp_ring: OTP ~s: ~s bytes of ring records in ~s~n",
                      [erlang:system_info(otp_release), Bytes, Out])
    after 10000 -> fail("ring_record wrote nothing")
    end,
    port_close(Port);
main(_) ->
    io:format(standard_error, "usage: otp_ring.escript RingRecord Out~n", []),
    halt(2).

fail(Why) ->
    io:format(standard_error, "otp_ring: ~s~n", [Why]),
    halt(1).

%% A module whose names are outside Latin-1 (UTF-8 atoms in the records).
unicode_module() ->
    M = 'kprof_ring_ünïcödé',   % a module's name is Latin-1 (OTP 25's compiler)
    Forms = [{attribute, 1, module, M}, {attribute, 1, export, [{'fün_λ', 1}]},
             {function, 1, 'fün_λ', 1, [{clause, 1, [{var, 1, 'X'}], [],
                                         [{call, 1, {remote, 1, {atom, 1, lists}, {atom, 1, reverse}},
                                           [{var, 1, 'X'}]}]}]}],
    {ok, M, Bin} = compile:forms(Forms, [return_errors]),
    {module, M} = code:load_binary(M, "nofile", Bin),
    M.

work(Unicode) ->
    Tracer = {tracer, kprof_tracer, 1},
    Flags = [call, return_to, arity, running, procs, garbage_collection, set_on_spawn, Tracer],
    %% The flame captures' patterns: every function of lists with its caller,
    %% maps with `true'; the tiers': a label and a payload in a request's call.
    true = 1 < erlang:trace_pattern({lists, '_', '_'}, [{'_', [], [{message, {caller}}]}], [local]),
    true = 1 < erlang:trace_pattern({maps, '_', '_'}, true, [local]),
    1 = erlang:trace_pattern({Unicode, 'fün_λ', 1},
                             [{'_', [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}}}}]}], [local]),
    1 = erlang:trace_pattern({string, lexemes, 2},
                             [{['$1', '_'], [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}, '$1'}}}]}],
                             [local]),
    1 = erlang:trace_pattern({erlang, binary_to_term, 1},
                             [{'_', [], [{return_trace}, {exception_trace}]}], [{meta, kprof_tracer, {meta, 1}}]),
    Self = self(),
    W = spawn(fun() ->
                      receive go -> ok end,
                      register(kprof_ring_work, self()),
                      _ = lists:sort([X rem 7 || X <- lists:seq(1, 50)]),
                      _ = maps:to_list(maps:from_list([{X, X} || X <- lists:seq(1, 40)])),
                      seq_trace:set_token(label, {request, 42}),
                      _ = Unicode:'fün_λ'([a, b, c]),
                      _ = string:lexemes("a b c", " "),
                      %% The tiers' request markers, written by the process
                      %% itself: a label, a payload the NIF encodes and one
                      %% the VM does, no caller.
                      true = kprof_tracer:mark(1, {kprof_mark, start, 1}, 7, {page, <<"/x">>, [1, 2]}),
                      true = kprof_tracer:mark(1, {kprof_mark, start, 1}, 8, #{k => self()}),
                      true = kprof_tracer:mark(1, {kprof_mark, stop, 0}, 8),
                      seq_trace:set_token([]),
                      _ = binary_to_term(term_to_binary(ok)),
                      _ = (try binary_to_term(<<1, 2, 3>>) catch error:badarg -> bad end),
                      {P, R} = spawn_monitor(fun() -> lists:reverse([1, 2, 3]), exit(done) end),
                      receive {'DOWN', R, process, P, _} -> ok end,
                      erlang:garbage_collect(),
                      receive after 5 -> ok end,
                      unregister(kprof_ring_work),
                      Self ! {worked, self()}
              end),
    erlang:trace(W, true, Flags),
    W ! go,
    receive {worked, W} -> ok after 10000 -> fail("the traced work did not end") end,
    _ = try erlang:trace(W, false, [all]) catch error:badarg -> gone end,
    erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    erlang:trace_pattern({'_', '_', '_'}, false, [meta]),
    ok.
