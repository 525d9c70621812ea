%%% @doc The application's resource file and the modules' dependencies:
%%% kprof.app's `registered' is exactly the names the application registers
%%% and its `modules' exactly its object files; kprof's own modules do not
%%% call the facade (only the integration modules do, as a user's code
%%% would), kprof_flame_srv does not call kprof_flame back, and
%%% kprof_report asks no node for anything.
-module(kprof_app_tests).

-include_lib("eunit/include/eunit.hrl").

%% The integration modules: a user's code, calling the facade.
-define(FACADE_USERS, [kprof_flame_web, kprof_tiers_httpd, kprof_tiers_mochiweb]).

-spec registered_test() -> term().
registered_test() ->
    Running = lists:keymember(kprof, 1, application:which_applications()),
    ok = kprof:start(),
    try
        {ok, Listed} = application:get_key(kprof, registered),
        Ours = [N || N <- registered(),
                     application:get_application(whereis(N)) =:= {ok, kprof}],
        ?assertEqual(lists:sort(Listed), lists:sort(Ours))
    after
        _ = Running orelse kprof:stop()
    end.

-spec modules_test() -> term().
modules_test() ->
    _ = application:load(kprof),
    {ok, Listed} = application:get_key(kprof, modules),
    ?assertEqual(lists:sort(Listed), lists:sort(beams())).

-spec facade_not_called_inside_test() -> term().
facade_not_called_inside_test() ->
    Callers = [M || M <- beams(), M =/= kprof, lists:member(kprof, callees(M))],
    ?assertEqual([], Callers -- ?FACADE_USERS).

-spec one_way_test() -> term().
one_way_test() ->
    ?assert(lists:member(kprof_flame_srv, callees(kprof_flame))),
    ?assertNot(lists:member(kprof_flame, callees(kprof_flame_srv))),
    ?assertEqual([], [M || M <- callees(kprof_report), lists:member(M, [erpc, rpc])]).

%% CONTRIBUTING.md, "Naming: Erlang modules": a web adapter is
%% kprof_<job>_<server>, and the old names (kprof_httpd, kprof_mochiweb,
%% kprof_httpd_flame) are gone.
-spec web_adapter_names_test() -> term().
web_adapter_names_test() ->
    Adapters = [atom_to_list(M) || M <- beams(),
                                   re:run(atom_to_list(M), "httpd|mochiweb") =/= nomatch],
    ?assertEqual(["kprof_flame_httpd", "kprof_flame_mochiweb", "kprof_tiers_httpd",
                  "kprof_tiers_mochiweb"], lists:sort(Adapters)),
    ?assertEqual([], [M || M <- Adapters,
                           re:run(M, "^kprof_(tiers|flame)_(httpd|mochiweb)$") =:= nomatch]).

%% The modules of kprof's ebin directory.
-spec beams() -> [module()].
beams() ->
    Dir = filename:dirname(code:which(kprof)),
    [list_to_atom(filename:basename(F, ".beam")) || F <- filelib:wildcard("*.beam", Dir)].

%% The modules M calls (its imports: every remote call to a named module).
-spec callees(module()) -> [module()].
callees(M) ->
    {ok, {M, [{imports, Imports}]}} = beam_lib:chunks(code:which(M), [imports]),
    lists:usort([Callee || {Callee, _, _} <- Imports]).
