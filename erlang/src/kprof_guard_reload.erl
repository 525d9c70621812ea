%%% @doc Trace patterns put back after a code reload, for {@link
%%% kprof_guard}: loading a module's new code drops the patterns its old
%%% code had, in every trace session. Once a second the guard gives each
%%% armed mode's patterns to {@link check/2}, which looks at them in the
%%% mode's session (its own on OTP 27 and later, the legacy API's before)
%%% and sets again the ones a reload dropped.
%%%
%%% A pattern on one function (or a wildcard of one module) is checked on
%%% that function (the module's first for a wildcard). A module-wide pattern,
%%% `{module, M, MatchSpec, Flags, Sentinel}' as {@link module_pattern/4}
%%% sets it (full trace), is checked on its sentinel alone, one function
%%% of `M': a reload replaces the whole module, so one function that lost
%%% its pattern means they all did. It is set again with a new sentinel,
%%% then the mode's patterns on functions of `M' after it (they win over it,
%%% as when the mode set them after it).
-module(kprof_guard_reload).

-export([check/3, module_pattern/4]).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc The mode's patterns, with a new sentinel for each module-wide one
%% put back, and how many were put back. `Put' is told of each as soon as
%% it is set again: the `MFA' of a pattern, ``{M, '_', '_'}'' of a
%% module-wide one. `on_load' patterns are for modules loaded later:
%% nothing to check. A session destroyed meanwhile (the mode ended) has
%% nothing to put back.
-spec check(kprof_trace_session:session(), [kprof_guard:pattern()],
            fun((mfa() | {module(), '_', '_'}) -> term())) ->
          {[kprof_guard:pattern()], non_neg_integer()}.
check(Session, Ps0, Put) ->
    N1 = length([MFA || P = {MFA, _, _} <- Ps0, MFA =/= on_load, reapply(Session, P, Put)]),
    {Ps, N2} = lists:mapfoldl(fun(P = {module, _, _, _, _}, N) ->
                                      reapply_module(Session, P, Ps0, Put, N);
                                 (P, N) ->
                                      {P, N}
                              end, 0, Ps0),
    {Ps, N1 + N2}.

%% @doc Sets `MatchSpec' with `Flags' on every function of module `M', in
%% `Session' (``erlang:trace_pattern({M, '_', '_'}, MatchSpec, Flags)''
%% there), then takes it off the BIFs among its exports (a traced BIF sends
%% a `return_to' of its own), and returns the `{module, M, MatchSpec,
%% Flags, Sentinel}' pattern the guard watches for it: `Sentinel' is the
%% first function of `M', BIFs aside, that has the pattern now, `undefined'
%% if none has (`M' not loaded, or only BIFs).
-spec module_pattern(kprof_trace_session:session(), module(), term(), list()) ->
          kprof_guard:pattern().
module_pattern(Session, M, MS, Flags) when is_atom(M), is_list(Flags) ->
    _ = set(Session, {M, '_', '_'}, MS, Flags),
    _ = [set(Session, {M, F, A}, false, Flags)
         || {F, A} <- module_info(M, exports), erlang:is_builtin(M, F, A)],
    {module, M, MS, Flags, sentinel(Session, M, Flags)}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec reapply_module(kprof_trace_session:session(), kprof_guard:pattern(),
                     [kprof_guard:pattern()], fun((term()) -> term()), non_neg_integer()) ->
          {kprof_guard:pattern(), non_neg_integer()}.
reapply_module(Session, P = {module, M, MS, Flags, Sentinel}, Ps0, Put, N) ->
    case Sentinel =/= undefined andalso erlang:module_loaded(M)
        andalso not has_pattern(Session, Sentinel, Flags) of
        true ->
            P1 = module_pattern(Session, M, MS, Flags),
            _ = [set(Session, MFA, MS1, Flags1)
                 || {MFA = {M1, _, _}, MS1, Flags1} <- Ps0, M1 =:= M],
            _ = Put({M, '_', '_'}),
            logger:notice("kprof: trace patterns on the functions of ~p were lost"
                          " (code reload?); put back", [M]),
            {P1, N + 1};
        false ->
            {P, N}
    end.

-spec reapply(kprof_trace_session:session(), {mfa() | tuple(), term(), list()},
              fun((term()) -> term())) -> boolean().
reapply(Session, {MFA = {M, _, _}, MS, Flags}, Put) ->
    case code:is_loaded(M) =/= false andalso not is_traced(Session, MFA, Flags) of
        true ->
            _ = set(Session, MFA, MS, Flags),
            _ = Put(MFA),
            logger:notice("kprof: trace pattern on ~p was lost (code reload?); put back",
                          [MFA]),
            true;
        false ->
            false
    end.

%% A pattern set (or taken off) in the session, whatever the VM says of it
%% (a module gone, the session destroyed).
-spec set(kprof_trace_session:session(), tuple(), term(), list()) -> non_neg_integer().
set(Session, MFA, MS, Flags) ->
    try kprof_trace_session:function(Session, MFA, MS, Flags) catch _:_ -> 0 end.

%% A wildcard pattern is checked on the module's first function. (A session
%% the mode's end destroyed meanwhile has nothing to put back.)
is_traced(Session, {M, '_', _}, Flags) ->
    case module_info(M, functions) of
        [{F, A} | _] -> is_traced(Session, {M, F, A}, Flags);
        _ -> true
    end;
is_traced(Session, {M, F, '_'}, Flags) ->
    case [A || {F1, A} <- module_info(M, functions), F1 =:= F] of
        [A | _] -> is_traced(Session, {M, F, A}, Flags);
        [] -> true
    end;
is_traced(Session, MFA, Flags) ->
    %% (A function reloaded under an `on_load' pattern shows `{meta, []}'
    %% with no meta match spec: not meta traced.)
    {Item, Off} = case lists:any(fun is_meta/1, Flags) of
                      true -> {meta_match_spec, {meta_match_spec, false}};
                      false -> {traced, {traced, false}}
                  end,
    try kprof_trace_session:info(Session, MFA, Item) =/= Off
    catch error:badarg -> true
    end.

%% A sentinel has its pattern: not when it is gone from the module either
%% (`{traced, undefined}'), the module reloaded without it.
has_pattern(Session, MFA, Flags) ->
    Item = case lists:any(fun is_meta/1, Flags) of
               true -> meta_match_spec;
               false -> traced
           end,
    case try kprof_trace_session:info(Session, MFA, Item) catch error:badarg -> gone end of
        {Item, false} -> false;
        {Item, undefined} -> false;
        _ -> true
    end.

%% The first function of M, BIFs aside, with a pattern of Flags' kind.
sentinel(Session, M, Flags) ->
    sentinel(Session, M, Flags, module_info(M, functions)).

sentinel(_Session, _M, _Flags, []) ->
    undefined;
sentinel(Session, M, Flags, [{F, A} | Rest]) ->
    case not erlang:is_builtin(M, F, A) andalso has_pattern(Session, {M, F, A}, Flags) of
        true -> {M, F, A};
        false -> sentinel(Session, M, Flags, Rest)
    end.

module_info(M, What) ->
    try M:module_info(What) of
        L when is_list(L) -> L;
        _ -> []
    catch
        _:_ -> []
    end.

is_meta(meta) -> true;
is_meta({meta, _}) -> true;
is_meta({meta, _, _}) -> true;
is_meta(_) -> false.
