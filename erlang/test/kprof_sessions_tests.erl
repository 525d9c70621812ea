%% kprof_sessions: what kprof makes of other trace sessions (OTP 27 and
%% later). This machine has OTP 25, which has none: the decisions are checked
%% with answers given to them (a probe), as an OTP with sessions would give
%% them, and the real probe is checked to answer nothing here.
-module(kprof_sessions_tests).

-include_lib("eunit/include/eunit.hrl").

%% Three processes; A traced by dbg's session (call and gc), B by kprof in
%% the default session, C by nobody; new processes get dbg's gc flags.
-define(DBG, dbg_tracer).
-define(OURS, {kprof_tracer, 7}).

probe(A, B, C) ->
    Sessions = #{A => [default, dbg], B => [default], C => [], new => [dbg]},
    Answers = #{{dbg, A, tracer} => {tracer, ?DBG},
                {dbg, A, flags} => {flags, [call, garbage_collection]},
                {default, A, tracer} => {tracer, []},
                {default, A, flags} => {flags, []},
                {default, B, tracer} => {tracer, ?OURS},
                {default, B, flags} => {flags, [call, garbage_collection]},
                {dbg, new, tracer} => {tracer, ?DBG},
                {dbg, new, flags} => {flags, [garbage_collection]}},
    #{supported => true,
      processes => fun() -> [A, B, C] end,
      sessions => fun(Who) -> maps:get(Who, Sessions, undefined) end,
      info => fun(S, Who, Item) -> maps:get({S, Who, Item}, Answers, undefined) end,
      ours => fun(T) -> T =:= ?OURS end}.

pids() ->
    [spawn(fun() -> receive stop -> ok end end) || _ <- [a, b, c]].

-spec others_test() -> term().
others_test() ->
    [A, B, C] = pids(),
    P = probe(A, B, C),
    %% Only dbg's session is another: kprof's own tracer and an empty one are not.
    ?assertEqual([{A, ?DBG}], kprof_sessions:others(P)),
    %% No sessions (before OTP 27): nothing, whatever the rest would say.
    ?assertEqual([], kprof_sessions:others(P#{supported := false})),
    [X ! stop || X <- [A, B, C]].

-spec gc_conflict_test() -> term().
gc_conflict_test() ->
    [A, B, C] = pids(),
    P = probe(A, B, C),
    %% A: dbg's session traces its garbage collection.
    ?assertEqual({A, ?DBG}, kprof_sessions:gc_conflict({[C, A], false}, P)),
    %% B's gc is traced by kprof itself, C's by nobody: no conflict.
    ?assertEqual(none, kprof_sessions:gc_conflict({[B, C], false}, P)),
    %% With children, the processes yet to be spawned count: dbg set gc for new ones.
    ?assertEqual({new, ?DBG}, kprof_sessions:gc_conflict({[B, C], true}, P)),
    %% flame_capture: any process, and new ones.
    ?assertMatch({_, ?DBG}, kprof_sessions:gc_conflict(all, P)),
    %% dbg traces calls only: no conflict anywhere.
    NoGc = P#{info := fun(S, Who, flags) when S =:= dbg ->
                              _ = Who, {flags, [call]};
                         (S, Who, Item) -> (maps:get(info, P))(S, Who, Item)
                      end},
    ?assertEqual(none, kprof_sessions:gc_conflict(all, NoGc)),
    ?assertEqual(none, kprof_sessions:gc_conflict(all, P#{supported := false})),
    [X ! stop || X <- [A, B, C]].

%% A session that ends, a process that exits between two answers (badarg):
%% skipped, never a crash.
-spec vanishing_test() -> term().
vanishing_test() ->
    [A, B, C] = pids(),
    P = probe(A, B, C),
    Gone = P#{info := fun(_, _, _) -> error(badarg) end},
    ?assertEqual([], kprof_sessions:others(Gone)),
    ?assertEqual(none, kprof_sessions:gc_conflict(all, Gone)),
    Dead = P#{sessions := fun(_) -> error(badarg) end},
    ?assertEqual([], kprof_sessions:others(Dead)),
    ?assertEqual(none, kprof_sessions:gc_conflict({[A], true}, Dead)),
    [X ! stop || X <- [A, B, C]].

%% This VM: sessions only from OTP 27, and then the probe's own answers.
-spec this_vm_test() -> term().
this_vm_test() ->
    Otp = list_to_integer(erlang:system_info(otp_release)),
    ?assertEqual(Otp >= 27, kprof_sessions:supported()),
    case Otp >= 27 of
        false ->
            ?assertEqual([], kprof_sessions:others()),
            ?assertEqual(none, kprof_sessions:gc_conflict(all));
        true ->
            ?assert(is_list(kprof_sessions:others()))
    end.
