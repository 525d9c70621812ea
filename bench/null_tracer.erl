%%% @doc An erl_tracer that does nothing (bench/null_tracer_nif.c): the
%%% dispatch floor row of `make bench-overhead'. Its NIF is loaded from the
%%% directory this module's beam is in (_build/bench).
-module(null_tracer).

-export([enabled/3, trace/5, loaded/0, thread_cpu_ns/0]).

-on_load(init/0).

init() ->
    erlang:load_nif(filename:join(filename:dirname(code:which(?MODULE)), "null_tracer"), 0).

%% @doc Whether the NIF answers (the module does not load without it).
-spec loaded() -> boolean().
loaded() ->
    enabled(trace_status, [], self()) =:= trace.

%% @private erl_tracer callback (the NIF): always `trace'.
-spec enabled(atom(), term(), pid() | port()) -> trace.
enabled(_Tag, _State, _Tracee) ->
    erlang:nif_error({not_loaded, ?MODULE}).

%% @doc The CPU time of the scheduler thread the caller runs on, in ns.
-spec thread_cpu_ns() -> integer().
thread_cpu_ns() ->
    erlang:nif_error({not_loaded, ?MODULE}).

%% @private erl_tracer callback (the NIF): always `ok'.
-spec trace(atom(), term(), pid() | port(), term(), map()) -> ok.
trace(_Tag, _State, _Tracee, _Term, _Opts) ->
    erlang:nif_error({not_loaded, ?MODULE}).
