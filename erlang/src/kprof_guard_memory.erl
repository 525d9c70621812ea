%%% @doc Where the node's memory is, for the guard's `memory_bytes' abort
%%% (kprof_guard: `max_memory_bytes'), read once tracing is off: the
%%% alert's `memory', erlang:memory/0's parts as a map, and `largest', the
%%% three processes that hold the most, each `#{pid, memory,
%%% registered_name, current_function, message_queue_len}'. A node of more
%%% than 100,000 processes gets `largest => []': scanning them would take
%%% longer than the abort.
-module(kprof_guard_memory).

-export([explained/2]).

%% A node of no more processes gets its largest named.
-define(MAX_SCAN, 100000).
-define(LARGEST, 3).

%% @doc `Info' of an alert of kind `Kind', with where the memory is when it
%% is a `memory_bytes' one (its message says it too: kprof_alert); any
%% other as it is.
-spec explained(atom(), kprof_alert:info()) -> kprof_alert:info().
explained(Kind, #{what := memory_bytes, value := V, bound := B} = Info) ->
    kprof_alert:new(Kind, memory_bytes, V, B,
                    Info#{memory => maps:from_list(erlang:memory()), largest => largest()});
explained(_Kind, Info) ->
    Info.

largest() ->
    case erlang:system_info(process_count) =< ?MAX_SCAN of
        true ->
            Sized = [{M, P} || P <- processes(), {memory, M} <- [process_info(P, memory)]],
            Top = lists:sublist(lists:reverse(lists:sort(Sized)), ?LARGEST),
            lists:append([described(P, M) || {M, P} <- Top]);
        false ->
            []
    end.

%% A process that exited since it was sized is left out.
described(P, M) ->
    case process_info(P, [registered_name, current_function, message_queue_len]) of
        undefined -> [];
        Items -> [maps:from_list([{pid, P}, {memory, M} | Items])]
    end.
