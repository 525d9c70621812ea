%% kprof_tiers' server state, shared by kprof_tiers (the server, its setup
%% and stops) and kprof_tiers_window (its polls of the sink and the reports
%% made of them).

%% A poll of the sink in flight (start_poll/1); `final': sent after the
%% tiers stopped, its answer is the last.
-record(poll, {ref :: reference(), pid :: pid(), started :: integer(), final :: boolean()}).

-record(state, {plan :: undefined | #plan{},
                active = false :: boolean(),
                nodes = [] :: [node()],          % started from this node
                since = 0 :: integer(),          % monotonic ns of start/reset
                until :: undefined | integer(),  % monotonic ns of stop/abort
                counters :: undefined | counters:counters_ref(),
                base = #{} :: #{atom() => non_neg_integer()},  % sink stats at start/reset
                port :: undefined | port(),      % the sink the tiers started on
                %% What the last answered poll gave: without a window the
                %% sink's report since start/reset, with one its slices.
                snap :: undefined | map(),
                slices = [] :: [{integer(), integer(), map()}], % newest first
                slice_from = 0 :: integer(),
                stats = #{} :: map(),            % the sink's stats
                full :: undefined | map(),       % full trace's aggregates
                polled_at :: undefined | integer(), % monotonic ns that poll was sent
                polls = 0 :: non_neg_integer(),
                last_ts :: term(),               % the sink's last event, last poll
                quiet = false :: boolean(),      % no event between the last two polls
                timer :: undefined | reference(),
                poll :: undefined | #poll{},
                %% Report callers waiting for a poll sent after they asked.
                waiting = [] :: [{gen_server:from(), integer(), reference()}],
                final = false :: boolean(),      % stopped and the last poll taken
                aborted = false :: false | {term(), term(), integer()},
                %% The sink died: rows after polled_at are lost.
                sink_lost = false :: false | map(),
                %% This server's killed predecessor left tracing on; this is
                %% what init/1 turned off.
                restarted = false :: false | map(),
                %% The sink's part of a stop or abort, under way (clean_sink/2).
                cleaning :: undefined | {reference(), pid(), undefined | gen_server:from()},
                sink_mon :: undefined | reference(),
                %% What the tracing costs the node, poll by poll (kprof_tiers_cost).
                cost :: undefined | kprof_tiers_cost:cost()}).
