%%% @doc Helpers shared by the EUnit suites that reload traced code: waiting
%%% for a condition, and loading a module's own object code again.
-module(kprof_test_util).

-export([wait_until/2, reload/1]).

%% @doc Polls `F' every 20 ms until it returns `true'; `error(timeout)' after `Ms'.
-spec wait_until(fun(() -> boolean()), integer()) -> ok.
wait_until(F, Ms) when Ms =< 0 ->
    case F() of true -> ok; false -> error(timeout) end;
wait_until(F, Ms) ->
    case F() of
        true -> ok;
        false -> timer:sleep(20), wait_until(F, Ms - 20)
    end.

%% @doc A new version of `Mod', its own object code loaded again, as a code
%% upgrade does: its trace patterns are gone.
-spec reload(module()) -> ok.
reload(Mod) ->
    _ = code:purge(Mod),
    {Mod, Bin, File} = code:get_object_code(Mod),
    {module, Mod} = code:load_binary(Mod, File, Bin),
    _ = code:soft_purge(Mod),
    ok.
