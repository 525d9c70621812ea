%%% @doc What a flame capture's processes are called in its files: their
%%% registered names and initial calls, which kprof_flame_srv sends the sink
%%% with the processes it traces and, before the files are written, for the
%%% processes that joined without it (children, flame_capture's callers).
%%% The sink labels the others by what it saw (port/callpath/names.c).
-module(kprof_flame_labels).

-export([label_members/1, call_of/1, call_of/2, name_of/1]).

-define(LABEL_MAX, 10000).
%% @doc Before a capture's files are written: sends the sink the names and
%% initial calls of its processes that joined without kprof_flame_srv
%% knowing them (children, flame_capture's callers), those still alive; the
%% sink labels the others by what it saw (port/callpath/names.c). At most
%% 10,000 processes.
-spec label_members(integer()) -> ok.
label_members(Id) ->
    case kprof_sink:command({flame_members, Id}) of
        Members when is_list(Members) ->
            Labels = [{P, name_of(P), call_of(P)}
                      || P <- lists:sublist(Members, ?LABEL_MAX), is_pid(P)],
            case [L || {_, N, C} = L <- Labels, N =/= undefined orelse C =/= undefined] of
                [] -> ok;
                Known -> _ = kprof_sink:command({flame_pids, Id, Known}), ok
            end;
        _ ->
            ok
    end.

%% @doc A process's label: its initial call (call_of/1), or for flame_apply's
%% caller, which has none of its own to show, what it runs (`runs' of the
%% capture's configuration).
-spec call_of(pid(), map()) -> binary() | undefined.
call_of(Pid, Cfg) ->
    case {call_of(Pid), Cfg} of
        {undefined, #{runs := MFA}} -> mfa_text(MFA);
        {Call, _} -> Call
    end.

%% @doc A process's initial call, "M:F/A", for its label and group: what proc_lib
%% recorded ('$initial_call', so a gen_server is its callback's init/1), else
%% its spawn MFA, unless that is erlang:apply/2 (spawn of a fun): then the
%% bottom frame of its stack, the fun (when the stack is short enough to see
%% it). undefined for a process gone.
-spec call_of(pid()) -> binary() | undefined.
call_of(Pid) ->
    case erlang:process_info(Pid, [dictionary, initial_call, current_stacktrace]) of
        [{dictionary, D}, {initial_call, Init}, {current_stacktrace, Stack}] ->
            case lists:keyfind('$initial_call', 1, D) of
                {_, {_, _, _} = I} -> mfa_text(I);
                _ when Init =/= {erlang, apply, 2} -> mfa_text(Init);
                _ -> mfa_text(bottom(Stack, Init))
            end;
        _ ->
            undefined
    end.

%% current_stacktrace holds the top backtrace_depth (8) frames: its last is
%% the bottom only when it holds fewer. Else undefined: the sink labels the
%% process by the first function it saw it call.
bottom(Stack, Init) when length(Stack) < 8 ->
    case lists:reverse(Stack) of
        [{M, F, A, _} | _] when is_integer(A) -> {M, F, A};
        [{M, F, Args, _} | _] when is_list(Args) -> {M, F, length(Args)};
        _ -> Init
    end;
bottom(_, _) ->
    undefined.

-spec mfa_text({atom(), atom(), arity()} | undefined) -> binary() | undefined.
mfa_text(undefined) -> undefined;
mfa_text({M, F, A}) ->
    unicode:characters_to_binary(io_lib:format("~ts:~ts/~b", [M, F, A])).

%% @doc A process's registered name, or undefined.
-spec name_of(pid()) -> binary() | undefined.
name_of(Pid) ->
    case erlang:process_info(Pid, registered_name) of
        {registered_name, Name} -> atom_to_binary(Name, utf8);
        _ -> undefined
    end.
