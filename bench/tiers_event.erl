%%% @doc What one tier call costs the traced process, by the parts of the
%%% tier match spec (`make bench-tiers-event').
%%%
%%% A tier call is a call event and its return_to, sent with the tiers'
%%% flags (`[call, arity, return_to]') and match spec,
%%% `[{'_', [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}}}}]}]'
%%% (kprof_tiers_plan:tier_ms/0). Here a process that carries a seq_trace
%%% token (as a traced request does) calls a traced function in a loop,
%%% with the pattern built up part by part:
%%% <ul>
%%% <li>`true': no match spec (every call traced, the plain message);</li>
%%% <li>`guard': `[{'_', [{is_seq_trace}], []}]', the guard alone;</li>
%%% <li>`const': the guard and `{message, 1}': a message body that builds
%%%     nothing;</li>
%%% <li>`token': the guard and `{message, {get_seq_token}}';</li>
%%% <li>`caller': the guard and `{message, {caller}}';</li>
%%% <li>`tier': the guard and both, as the tiers set it;</li>
%%% <li>`tier, no token': the same, called by a process with no token (a
%%%     request the sample leaves out, or code outside any request): the
%%%     guard fails;</li>
%%% <li>`no guard', with and without a token: the tiers' message without
%%%     the guard (the tracer would drop a call whose token is `[]'): what
%%%     the guard saves the calls outside requests.</li>
%%% </ul>
%%% Each through the null erl_tracer NIF (bench/null_tracer_nif.c: the VM's
%%% own cost, nothing written) and through the kprof_tracer NIF writing into
%%% a running sink's ring (the sink reads and drops them). The loop's
%%% process is bound to scheduler 1; its scheduler thread's CPU time
%%% (null_tracer:thread_cpu_ns/0) for N calls of the traced function less
%%% the same for N calls of an untraced one, in the same process; the
%%% smallest of the rounds (one the OS did not interrupt), the variants
%%% interleaved in each round. Events per call are counted once per
%%% variant with a process as tracer. Rewrites the section "Tiers: one
%%% event, by the parts of its match spec" of bench/RESULTS.md. Not a test:
%%% nothing fails on a number.
-module(tiers_event).

-export([main/1]).
%% The loop's functions: remote calls, traced and not.
-export([tier/1, plain/1]).

-define(FLAGS, [call, arity, return_to]).
-define(MFA, {?MODULE, tier, 1}).
-define(VARIANTS, [true, guard, const, token, caller, tier, no_token, no_guard, no_guard_no_token]).
-define(SECTION, "Tiers: one event, by the parts of its match spec").

%% @doc `main([Calls, Rounds, ResultsFile])', all strings (from the Makefile).
-spec main([string()]) -> no_return().
main([Calls0, Rounds0, Results]) ->
    [Calls, Rounds] = [list_to_integer(A) || A <- [Calls0, Rounds0]],
    logger:set_handler_config(default, level, error),
    ok = kprof:start(),
    true = null_tracer:loaded(),
    Tracers = [{null, {tracer, null_tracer, []}}, {ring, kprof_sink:tracer()}],
    Load0 = overhead_bench:load_average(),
    Events = [{V, events(V, Calls)} || V <- ?VARIANTS],
    Runs = [{T, V, run(Tracer, V, Calls)}
            || _ <- lists:seq(1, Rounds), {T, Tracer} <- Tracers, V <- ?VARIANTS],
    Load1 = overhead_bench:load_average(),
    Rows = [{T, V, lists:min([Ns || {T1, V1, Ns} <- Runs, T1 =:= T, V1 =:= V]) / Calls}
            || {T, _} <- Tracers, V <- ?VARIANTS],
    Text = text(Rows, Events, Calls, Rounds, Load0, Load1),
    io:format("~s", [Text]),
    overhead_bench:write_section(Results, ?SECTION, Text),
    halt(0).

%% The traced loop's thread CPU less the untraced loop's, ns, for Calls calls.
-spec run(tuple(), atom(), pos_integer()) -> integer().
run(Tracer, Variant, Calls) ->
    {_, Ns} = traced(Tracer, Variant, fun() ->
                                              Plain = cpu(plain, Calls),
                                              cpu(tier, Calls) - Plain
                                      end),
    Ns.

%% Events per call of the variant: counted with this process as the tracer.
-spec events(atom(), pos_integer()) -> float().
events(Variant, Calls) ->
    {P, ok} = traced({tracer, self()}, Variant, fun() -> loop(tier, Calls) end),
    %% Every event was sent before the loop's answer: delivered by now.
    Ref = erlang:trace_delivered(P),
    receive {trace_delivered, P, Ref} -> ok after 60000 -> error({undelivered, Variant}) end,
    count(P, 0) / Calls.

%% Body run on scheduler 1 in a process traced by Tracer with the variant's
%% pattern and token; the pattern cleared after. {The process, Body's result}.
-spec traced(tuple(), atom(), fun(() -> term())) -> {pid(), term()}.
traced(Tracer, Variant, Body) ->
    Self = self(),
    P = spawn(fun() ->
                      _ = erlang:process_flag(scheduler, 1),
                      receive go -> ok end,   % scheduled in again: on scheduler 1
                      %% After the receive: a message without a token clears
                      %% the receiver's.
                      token(Variant),
                      R = Body(),
                      seq_trace:set_token([]),
                      Self ! {ran, self(), R}
              end),
    1 = erlang:trace_pattern(?MFA, ms(Variant), [local]),
    1 = erlang:trace(P, true, [Tracer | ?FLAGS]),
    P ! go,
    receive
        {ran, P, R} ->
            erlang:trace_pattern(?MFA, false, [local]),
            {P, R}
    after 60000 -> error({timeout, Variant})
    end.

count(P, N) ->
    receive
        {trace, P, _, _} -> count(P, N + 1);
        {trace, P, _, _, _} -> count(P, N + 1)
    after 0 -> N
    end.

%% A token as kprof:request/2 sets one (a label), but for `no_token'.
-spec token(atom()) -> ok.
token(V) when V =:= no_token; V =:= no_guard_no_token -> ok;
token(_) -> _ = seq_trace:set_token(label, 1), true = seq_trace:get_token() =/= [], ok.

-spec ms(atom()) -> true | [tuple()].
ms(true) -> true;
ms(guard) -> [{'_', [{is_seq_trace}], []}];
ms(const) -> [{'_', [{is_seq_trace}], [{message, 1}]}];
ms(token) -> [{'_', [{is_seq_trace}], [{message, {get_seq_token}}]}];
ms(caller) -> [{'_', [{is_seq_trace}], [{message, {caller}}]}];
ms(V) when V =:= tier; V =:= no_token -> kprof_tiers_plan:tier_ms();
ms(V) when V =:= no_guard; V =:= no_guard_no_token ->
    [{'_', [], [{message, {{{get_seq_token}, {caller}}}}]}].

cpu(F, Calls) ->
    C0 = null_tracer:thread_cpu_ns(),
    loop(F, Calls),
    null_tracer:thread_cpu_ns() - C0.

loop(_, 0) -> ok;
loop(tier, N) -> _ = ?MODULE:tier(N), loop(tier, N - 1);
loop(plain, N) -> _ = ?MODULE:plain(N), loop(plain, N - 1).

%% @private The traced function.
-spec tier(term()) -> term().
tier(X) -> X.

%% @private The same, never traced.
-spec plain(term()) -> term().
plain(X) -> X.

text(Rows, Events, Calls, Rounds, Load0, Load1) ->
    Get = fun(T, V) -> hd([Ns || {T1, V1, Ns} <- Rows, T1 =:= T, V1 =:= V]) end,
    [io_lib:format("`make bench-tiers-event` (bench/tiers_event.erl): ~b calls of a traced "
                   "function per round, ~b rounds, the smallest; the loop's scheduler thread's "
                   "CPU time, less the same loop untraced. Load average before / after: ~s / ~s."
                   "~n~n", [Calls, Rounds, Load0, Load1]),
     "| pattern | events per call | null NIF ns/call | ring ns/call | ring - null ns/call |\n"
     "|---|--:|--:|--:|--:|\n",
     [io_lib:format("| ~ts | ~.2f | ~b | ~b | ~b |~n",
                    [name(V), proplists:get_value(V, Events), round(Get(null, V)),
                     round(Get(ring, V)), round(Get(ring, V) - Get(null, V))])
      || V <- ?VARIANTS],
     "\nEach part's cost per call, the row with it less the row without (ns, null NIF / "
     "ring):\n\n",
     [io_lib:format("- ~ts: ~b / ~b~n", [What, round(Get(null, A) - Get(null, B)),
                                         round(Get(ring, A) - Get(ring, B))])
      || {What, A, B} <- [{"the guard `{is_seq_trace}` (`guard` - `true`)", guard, true},
                          {"a message body that builds nothing (`const` - `guard`)", const, guard},
                          {"`{get_seq_token}` in the message (`token` - `guard`)", token, guard},
                          {"`{caller}` in the message (`caller` - `guard`)", caller, guard},
                          {"both (`tier` - `guard`)", tier, guard},
                          {"what the guard saves a call outside any request (`no guard`, no token - "
                           "the tiers', no token)", no_guard_no_token, no_token}]]].

name(true) -> "`true` (no match spec)";
name(guard) -> "`[{'_', [{is_seq_trace}], []}]`";
name(token) -> "guard, `{message, {get_seq_token}}`";
name(const) -> "guard, `{message, 1}`";
name(caller) -> "guard, `{message, {caller}}`";
name(tier) -> "guard, `{message, {{{get_seq_token}, {caller}}}}` (the tiers')";
name(no_token) -> "the tiers', called with no token (the guard fails)";
name(no_guard) -> "`[{'_', [], [{message, {{{get_seq_token}, {caller}}}}]}]` (no guard)";
name(no_guard_no_token) -> "the same, called with no token".
