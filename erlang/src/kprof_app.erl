%%% @doc The kprof application callback: starts {@link kprof_sup}; and
%%% starting the application from inside kprof ({@link ensure_started/0}).
%%%
%%% Users start the application with {@link kprof:start/0}; kprof's own
%%% modules that start it when it is not running (the tiers, the flame
%%% captures) call {@link ensure_started/0} here, never the facade.
-module(kprof_app).
-behaviour(application).

-export([start/2, stop/1]).
-export([ensure_started/0]).

%% @doc Start the top supervisor.
-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    %% Whether the VM has trace sessions is asked now, not by the first
    %% capture (kprof_sessions:supported/0).
    _ = kprof_sessions:supported(),
    kprof_sup:start_link().

%% @doc Nothing to clean up: the supervisor tree closes the sink's port.
-spec stop(term()) -> ok.
stop(_State) ->
    ok.

%% @doc Start kprof and its sink if they are not running, with the options
%% of the application environment; `{error, Reason}' with the sink
%% server's reason (`{sink_not_built, Path}', ...) out of the application
%% controller's wrapping.
-spec ensure_started() -> ok | {error, term()}.
ensure_started() ->
    case application:ensure_all_started(kprof) of
        {ok, _} -> ok;
        {error, Reason} -> {error, start_error(Reason)}
    end.

%% The reason the sink server gave, out of the application controller's
%% wrapping ({kprof, {bad_return, {..., {error, {shutdown, ...}}}}}).
-spec start_error(term()) -> term().
start_error(Reason) ->
    case find_reason(Reason) of
        {ok, Found} -> Found;
        error -> Reason
    end.

-spec find_reason(term()) -> {ok, term()} | error.
find_reason({sink_not_built, _} = R) -> {ok, R};
find_reason({sink_open_failed, _, _} = R) -> {ok, R};
find_reason({sink_not_answering, _, _} = R) -> {ok, R};
find_reason({sink_cannot_run, _, _} = R) -> {ok, R};
find_reason(T) when is_tuple(T) -> find_reason(tuple_to_list(T));
find_reason([H | T]) ->
    case find_reason(H) of
        {ok, _} = Found -> Found;
        error -> find_reason(T)
    end;
find_reason(_) -> error.
