%%% @doc The request markers of the tier profiler (doc/internals-tiers.md).
%%% Functions that do nothing. `start(Identity)' opens the request labelled
%%% by the caller's seq_trace token (the identity travels in the record);
%%% `stop()' ends it; `resume()' tells the sink that the process works for
%%% the request of its token again after a nested request (a `return_to'
%%% message has no label: the sink gives it to the request of the
%%% process's last labelled call). With the tracer NIF, {@link kprof_tiers}
%%% does not call them: it writes the records their traced calls would give
%%% (kprof_tracer:mark/3,4), which costs the request no trace event. With the
%%% port tracer {@link kprof:request/2} and {@link kprof:set_token/1} call
%%% them while {@link kprof_tiers} traces them, and the trace message of a
%%% call is the marker; nothing else should call them.
%%% They must stay remote calls into a loaded module: their trace patterns
%%% are global (a global pattern sends no `return_to', two events fewer a
%%% request), and a global pattern sees remote calls only; this module is
%%% loaded before its patterns are set.
-module(kprof_mark).

-export([start/1, stop/0, resume/0]).

%% @doc Marks the start of a request with this identity (a no-op unless
%% traced).
-spec start(term()) -> ok.
start(_Identity) ->
    ok.

%% @doc Marks the end of the calling process's request (a no-op unless
%% traced).
-spec stop() -> ok.
stop() ->
    ok.

%% @doc Marks that the calling process is back in the request of its
%% token (a no-op unless traced).
-spec resume() -> ok.
resume() ->
    ok.
