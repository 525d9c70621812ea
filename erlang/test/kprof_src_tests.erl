%% The application's own sources, as the OTPs users have compile them:
%% no `catch Expr' (OTP 29 warns on it by default; a `try' says which
%% exceptions it means).
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
