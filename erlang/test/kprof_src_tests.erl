%% The application's own sources, as the OTPs users have compile them:
%% no `catch Expr' (OTP 29 warns on it by default; a `try' says which
%% exceptions it means). And the modules' calls, as xref reads them from
%% the compiled modules: no module calls itself back through others (a
%% call cycle), and none calls the facade, kprof, which is the user's.
-module(kprof_src_tests).

-include_lib("eunit/include/eunit.hrl").

%% Parsing every module takes a few seconds on a loaded machine.
no_catch_expression_test_() ->
    {timeout, 300, fun no_catch_expression/0}.

no_catch_expression() ->
    Src = filename:join(filename:dirname(filename:dirname(code:which(kprof))), "src"),
    Inc = filename:join(filename:dirname(Src), "include"),
    Files = filelib:wildcard(filename:join(Src, "*.erl")),
    ?assert(length(Files) > 20),
    Found = [{filename:basename(F), Line}
             || F <- Files,
                {ok, Forms} <- [epp:parse_file(F, [{includes, [Inc]}])],
                Line <- catches(Forms)],
    ?assertEqual([], Found).

%% The lines of the `catch Expr' nodes anywhere in Forms.
catches(Forms) ->
    lists:usort(walk(Forms, [])).

walk({'catch', Anno, Expr}, Acc) ->
    walk(Expr, [erl_anno:line(Anno) | Acc]);
walk(T, Acc) when is_tuple(T) ->
    walk(tuple_to_list(T), Acc);
walk([H | T], Acc) ->
    walk(T, walk(H, Acc));
walk(_, Acc) ->
    Acc.

%%% The call graph between kprof's modules

%% Every call xref sees in erlang/ebin: `M:F(...)' with a literal module,
%% `fun M:F/A', `apply(M, F, Args)' with a literal module (a remote call
%% through erpc, by name, is not one). A cycle fails with its modules and
%% the calls that make it.
no_module_cycle_test_() ->
    {"no call cycle between kprof's modules",
     {timeout, 120, fun() -> with_xref(fun no_module_cycle/1) end}}.

no_module_cycle(X) ->
    {ok, Cycles} = xref:q(X, "components (ME ||| AM)"),
    Found = [{lists:sort(C), calls_within(X, C)} || C <- Cycles, length(C) > 1],
    ?assertEqual([], Found).

%% kprof is the user's: none of kprof's own modules calls it.
no_facade_caller_test_() ->
    {"no module of kprof's calls the facade",
     {timeout, 120, fun() -> with_xref(fun no_facade_caller/1) end}}.

no_facade_caller(X) ->
    {ok, Calls} = xref:q(X, "E || kprof"),
    ?assertEqual([], [Call || Call = {{M, _, _}, _} <- Calls, M =/= kprof]).

%% The function calls between the modules of a cycle.
calls_within(X, Modules) ->
    Set = lists:join(", ", [atom_to_list(M) || M <- Modules]),
    {ok, Calls} = xref:q(X, lists:flatten(["E | [", Set, "] || [", Set, "]"])),
    lists:sort([Call || Call = {{A, _, _}, {B, _, _}} <- Calls, A =/= B]).

%% An xref server in functions mode (it reads `fun M:F/A' too) on kprof's
%% ebin, whose every module has its debug_info (without it xref sees no
%% call, and a cycle would pass unseen).
with_xref(Check) ->
    Ebin = filename:dirname(code:which(kprof)),
    Beams = filelib:wildcard(filename:join(Ebin, "*.beam")),
    ?assert(length(Beams) > 20),
    ?assertEqual([], [B || B <- Beams,
                           element(1, beam_lib:chunks(B, [debug_info])) =/= ok]),
    {ok, X} = xref:start([{xref_mode, functions}]),
    try
        ok = xref:set_default(X, [{warnings, false}, {verbose, false}]),
        {ok, _} = xref:add_directory(X, Ebin),
        Check(X)
    after
        xref:stop(X)
    end.
