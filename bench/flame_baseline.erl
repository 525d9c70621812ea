%%% @doc The in-VM flame graph of eflame's design, the baseline of
%%% `make bench-flame' (bench/flame_bench.erl): the traced process sends its
%%% trace messages to an Erlang process, which keeps a stack per traced
%%% process, credits the time between two events to the stack that ran, and
%%% writes folded lines (`pid;frame;...;frame ns') to a file at the end.
%%% Written for the benchmark, not copied from eflame; like eflame it uses
%%% `[call, arity, return_to, running]' and a local pattern with
%%% `{message, {caller}}' on every function, and an Erlang process as the
%%% tracer. Unlike eflame, time is credited to the stack per event rather than
%%% sampled per millisecond, and a recursive call is a frame of its own.
%%%
%%% Stacks: a call of `MFA' whose caller is `C' pops the stack down to `C'
%%% and pushes `MFA' (a tail call's caller is its caller's caller, so the
%%% frame it replaces goes); `return_to MFA' pops the frame that returned,
%%% then down to `MFA'; scheduled
%%% out, the time goes to `SLEEP' on top of the stack.
-module(flame_baseline).

-export([apply/2]).

-define(FLAGS, [call, arity, return_to, monotonic_timestamp, running]).
-define(MS, [{'_', [], [{message, {caller}}]}]).

%% per traced process: the stack (innermost first), the time of its last
%% event, and whether it is scheduled out.
-record(p, {stack = [] :: [term()], t = undefined :: integer() | undefined,
            out = false :: boolean()}).

%% @doc Run `Fun()' traced in the calling process; the folded stacks go to
%% `File'. Returns `{ok, Result, Events}': the trace messages the tracer
%% received. The call patterns are removed after (eflame leaves them).
-spec apply(fun(() -> term()), file:filename()) -> {ok, term(), non_neg_integer()}.
apply(Fun, File) ->
    Tracer = spawn_link(fun() -> tracer(#{}, #{}, 0) end),
    _ = erlang:trace_pattern({'_', '_', '_'}, ?MS, [local]),
    1 = erlang:trace(self(), true, [{tracer, Tracer} | ?FLAGS]),
    Result = try Fun()
             after
                 erlang:trace(self(), false, [all]),
                 erlang:trace_pattern({'_', '_', '_'}, false, [local])
             end,
    %% Every trace message sent so far is in the tracer's mailbox before {dump, ...}.
    Ref = erlang:trace_delivered(self()),
    receive {trace_delivered, _, Ref} -> ok end,
    Tracer ! {dump, self(), File},
    receive
        {dumped, Tracer, Events} ->
            unlink(Tracer),
            {ok, Result, Events}
    end.

%% Procs: pid => #p{}; Acc: {Pid, Stack} => ns.
tracer(Procs, Acc, N) ->
    receive
        {trace_ts, Pid, What, A, B, Ts} ->   % call MFA Caller
            {Procs1, Acc1} = event(Pid, What, A, B, Ts, Procs, Acc),
            tracer(Procs1, Acc1, N + 1);
        {trace_ts, Pid, What, A, Ts} ->      % return_to MFA, in/out MFA
            {Procs1, Acc1} = event(Pid, What, A, undefined, Ts, Procs, Acc),
            tracer(Procs1, Acc1, N + 1);
        {dump, From, File} ->
            ok = file:write_file(File, folded(Acc)),
            From ! {dumped, self(), N}
    end.

event(Pid, What, A, B, Ts, Procs, Acc) ->
    P = maps:get(Pid, Procs, #p{}),
    Acc1 = credit(Pid, P, Ts, Acc),
    P1 = step(What, A, B, P),
    {Procs#{Pid => P1#p{t = Ts}}, Acc1}.

%% The time since the process's last event goes to the stack that ran.
credit(_Pid, #p{t = undefined}, _Ts, Acc) ->
    Acc;
credit(Pid, #p{stack = Stack, t = T, out = Out}, Ts, Acc) ->
    Key = {Pid, case Out of true -> ['SLEEP' | Stack]; false -> Stack end},
    Acc#{Key => maps:get(Key, Acc, 0) + (Ts - T)}.

step(call, MFA, Caller, P = #p{stack = Stack}) ->
    P#p{stack = [MFA | down_to(Caller, Stack)]};
step(return_to, MFA, _, P = #p{stack = Stack}) ->
    P#p{stack = case {MFA, Stack} of
                    {undefined, _} -> Stack;
                    {_, [_Returned | Below]} -> down_to(MFA, Below);
                    {_, []} -> [MFA]
                end};
step(out, _, _, P) ->
    P#p{out = true};
step(in, _, _, P) ->
    P#p{out = false};
step(_, _, _, P) ->
    P.

%% The stack from `Frame' down; `[Frame]' when it is not on the stack (the
%% caller was not traced yet, or is untraced code); the stack as it is for a
%% call from untraced code (caller `undefined').
down_to(undefined, Stack) ->
    Stack;
down_to(Frame, Stack) ->
    case drop_to(Frame, Stack) of
        false -> [Frame];
        Rest -> Rest
    end.

drop_to(Frame, [Frame | _] = Stack) -> Stack;
drop_to(Frame, [_ | Rest]) -> drop_to(Frame, Rest);
drop_to(_Frame, []) -> false.

folded(Acc) ->
    [[pid_to_list(Pid), [[$;, frame(F)] || F <- lists:reverse(Stack)], $\s,
      integer_to_list(Ns), $\n]
     || {{Pid, Stack}, Ns} <- lists:sort(maps:to_list(Acc)), Ns > 0].

frame({M, F, A}) ->
    [atom_to_binary(M, utf8), $:, atom_to_binary(F, utf8), $/, integer_to_list(A)];
frame(Atom) when is_atom(Atom) ->
    atom_to_binary(Atom, utf8).
