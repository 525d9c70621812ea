%% The drop counters kprof_report adds up and kprof_report_render prints.

%% The sink's drops per table, as the node reports count them.
-define(TABLE_DROPS, [sink_dropped_pids, sink_dropped_mfas, sink_dropped_names]).
%% Events the tracer NIF's ring lost, as the node reports count them: the
%% ring full, not encodable (an identity too big), of a pid the sink's table
%% refused, records the sink could not take (a table full, malformed).
-define(RING_DROPS, [ring_drops, ring_unsupported, ring_unresolved, ring_bad]).
