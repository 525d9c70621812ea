%%% @doc The kprof application callback: starts {@link kprof_sup}.
%%%
%%% Users start the application with {@link kprof:start/0}.
-module(kprof_app).
-behaviour(application).

-export([start/2, stop/1]).

%% @doc Start the top supervisor.
-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    kprof_sup:start_link().

%% @doc Nothing to clean up: the supervisor tree closes the sink's port.
-spec stop(term()) -> ok.
stop(_State) ->
    ok.
