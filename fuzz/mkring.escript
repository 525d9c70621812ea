#!/usr/bin/env escript
%% fuzz/mkring.escript Dir: seed inputs for fuzz_ring (fuzz/fuzz_ring.c) in Dir:
%% ring records as the kprof_tracer NIF writes them (include/ks_ring.h), for
%% both paths (first byte 0: replay; odd: through real rings, see script/2).
-mode(compile).

main([Dir]) ->
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    M = 16#1000b, F = 16#2000b, G = 16#3000b, P = 16#4003,
    Defs = [atom(M, <<"shop_db">>), atom(F, <<"query">>), atom(G, <<"run">>),
            pid(P, self())],
    Req = [call(-5000, P, M, F, 2, {M, G, 0}, 7, {users, get}),
           call(-4000, P, M, G, 0, none, 7, none),
           return_to(-3000, P, {M, F, 2}),
           return_to(-2000, P, undefined),
           call(-1000, P, M, F, 2, {M, G, 0}, 100000, <<"/users/:id">>)],
    Q = 16#5003,
    %% A flame capture's events: scheduling, a child, a name, GC, a trigger's meta events.
    Flame = [pid(Q, spawn(fun() -> ok end)),
             event(-900, P, in, 16#10, {M, F, 2}, 0),
             event(-800, P, spawn, 16#20 bor 16#10, {M, G, 1}, Q),
             event(-700, Q, spawned, 16#20 bor 16#10, {M, G, 1}, P),
             event(-600, P, register, 16#40, none, M),
             event(-500, P, gc_minor_start, 0, none, 0),
             event(-400, P, gc_minor_end, 0, none, 0),
             event(-300, P, return_from, 16#80 bor 16#10, {M, F, 2}, 0),
             event(-200, P, exception_from, 16#80 bor 16#10, {M, F, 2}, 0),
             event(-100, P, out, 0, none, 0),
             event(-50, Q, exit, 0, none, 0),
             %% The flame captures' pattern `true': calls with their function only.
             call_mfa(-40, P, {M, F, 2}, 0),
             call_mfa(-30, Q, {M, G, 0}, 16#80),
             return_to(-20, P, {M, F, 2})],
    %% Processes that come and go (odd exit times: fuzz_ring releases their
    %% ids), more of them than the tables hold, a word used again after its
    %% release (defined anew, and once not).
    Churn = lists:append(
              [[pid(W, spawn(fun() -> ok end)),
                event(2 * K, W, in, 0, none, 0),
                event(2 * K + 1, W, exit, 0, none, 0),
                event(2 * K + 2, W, out_exited, 0, none, 0)]
               || K <- lists:seq(1, 100), W <- [16#6003 + (K rem 70) * 16#100]])
        ++ [event(999, 16#6103, in, 0, none, 0)],
    Seeds = [{"defs-request", Defs ++ Req},
             {"churn", Defs ++ Churn ++ Req},
             {"request-then-defs", Req ++ Defs},
             {"many", Defs ++ lists:append(lists:duplicate(40, Req))},
             {"flame", Defs ++ Flame ++ Req},
             {"bad", Defs ++ [<<0:32, 200:16/little, 1, 255, 0:56/unit:8>>]}],
    [ok = file:write_file(filename:join(Dir, Name ++ "-" ++ integer_to_list(Mode)),
                          [Mode | script(Mode, Recs)])
     || {Name, Recs} <- Seeds, Mode <- [0, 1 bor 8, 7 bor 8, 7]],
    ok.

%% The rest of an input (fuzz/fuzz_ring.c): records as they are for the replay
%% (first byte even); for the rings, each behind the ring it goes to, round robin
%% over the rings the first byte says, and without "strict" (bit 3) a broken
%% writer's acts among them: a drain, a torn record, a bad length, a drain of 3.
script(Mode, Recs) when Mode band 1 =:= 0 ->
    Recs;
script(Mode, Recs) ->
    Rings = (Mode bsr 1) band 3 + 1,
    Acts = case Mode band 8 of
               8 -> [];
               0 -> [[16#80, <<0:64>>], [16#a1, <<3:64/little>>],
                     [16#b2, <<(1 bsl 58 + 16#ffff00000000):64/little>>],
                     [16#f3, <<3:64/little>>]]
           end,
    Steps = [[K rem Rings, R] || {K, R} <- lists:zip(lists:seq(0, length(Recs) - 1), Recs)],
    lists:append([Steps, Acts, Steps]).

rec(Type, Flags, Body) ->
    Len = (8 + byte_size(Body) + 7) band (bnot 7),
    Pad = Len - 8 - byte_size(Body),
    <<0:32, Len:16/little, Type, Flags, Body/binary, 0:Pad/unit:8>>.

atom(Word, Name) ->
    rec(3, 0, <<Word:64/little, (byte_size(Name)):16/little, 0, 0:40, Name/binary>>).

pid(Word, Pid) ->
    <<131, Etf/binary>> = term_to_binary(Pid),
    rec(4, 0, <<Word:64/little, (byte_size(Etf)):16/little, 0:48, Etf/binary>>).

call(Ts, P, M, F, A, Caller, Label, Payload) ->
    {CM, CF, CA, CFl} = case Caller of
                            none -> {0, 0, 0, 0};
                            {X, Y, Z} -> {X, Y, Z, 4}
                        end,
    <<131, L/binary>> = term_to_binary(Label),
    Pay = case Payload of
              none -> <<>>;
              _ -> <<131, B/binary>> = term_to_binary(Payload), B
          end,
    PFl = case Pay of <<>> -> 0; _ -> 8 end,
    rec(1, 1 bor 2 bor CFl bor PFl,
        <<Ts:64/little-signed, P:64/little, M:64/little, F:64/little, CM:64/little,
          CF:64/little, A, CA, (byte_size(L)), 0, (byte_size(Pay)):32/little,
          L/binary, Pay/binary>>).

%% An event record: Kind is its ks_event_kind (include/ks_event.h's order).
event(Ts, P, Kind, Flags, MFA, Other) ->
    {M, F, A} = case MFA of
                    none -> {0, 0, 0};
                    _ -> MFA
                end,
    rec(5, Flags, <<Ts:64/little-signed, P:64/little, M:64/little, F:64/little, Other:64/little,
                    (kind(Kind)), A, 0:48>>).

kind(K) ->
    Kinds = [call, return_from, exception_from, return_to, in, out, in_exiting, out_exiting,
             out_exited, spawn, spawned, exit, link, unlink, getting_linked, getting_unlinked,
             register, unregister, send, send_to_non_existing_process, 'receive',
             gc_minor_start, gc_minor_end, gc_major_start, gc_major_end],
    length(lists:takewhile(fun(X) -> X =/= K end, Kinds)).

%% A call of the pattern `true' (KS_REC_CALL_MFA): the return_to's shape.
call_mfa(Ts, P, {M, F, A}, Flags) ->
    rec(6, Flags, <<Ts:64/little-signed, P:64/little, M:64/little, F:64/little, A, 0:56>>).

return_to(Ts, P, MFA) ->
    {M, F, A, Fl} = case MFA of
                        undefined -> {0, 0, 0, 0};
                        {X, Y, Z} -> {X, Y, Z, 16}
                    end,
    rec(2, Fl, <<Ts:64/little-signed, P:64/little, M:64/little, F:64/little, A, 0:56>>).
