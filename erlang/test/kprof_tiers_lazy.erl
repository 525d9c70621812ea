%%% @doc A module no test loads before the tiers name it: start_tiers/2
%%% must load it (code:ensure_loaded/1). Its functions form one tier.
-module(kprof_tiers_lazy).

-export([f/1]).

%% @doc Burns `Us' microseconds in a local function.
-spec f(non_neg_integer()) -> ok.
f(Us) ->
    g(Us).

-spec g(non_neg_integer()) -> ok.
g(Us) ->
    kprof_tiers_work:burn_a(Us),
    ok.
