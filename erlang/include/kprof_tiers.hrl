%%% What the tiers' modules share (kprof_tiers, kprof_tiers_plan,
%%% kprof_tiers_trace, kprof_tiers_window): the plan a start compiles, and
%%% the term the request path reads.

%% {Sample, Counters, Patterns} while tiers run on this node: published by
%% kprof_tiers_trace:publish/1, read by kprof_tiers:enter/1 and abort/2.
-define(TIERS_PT, {kprof_tiers, request}).
%% The counters of that term.
-define(SEEN, 1).
-define(SAMPLED, 2).
-define(ACTIVE, 3).
%% Patterns kprof_guard put back after a code reload, since start.
-define(REAPPLIED, 4).
%% The fraction of requests traced, in millionths: `sample', or what
%% max_overhead lowered it to (kprof_tiers_cost).
-define(SAMPLE_PPM, 5).
-define(COUNTERS, 5).

%% What kprof_tiers_plan:check/2 compiles and kprof_tiers_trace sets; kept in
%% kprof_records while tracing is on (a restarted server undoes it).
-record(plan, {tiers = [] :: [{atom(), [kprof_tiers:mfa_spec()]}],
               patterns = [] :: [kprof_tiers_plan:pattern()], % in the order they are set
               sink_specs = [] :: [kprof_tiers_plan:sink_spec()],
               sink_opts = [] :: [{atom(), term()}],
               full = false :: false | all | [term()],  % full_trace
               full_patterns = [] :: [kprof_tiers_plan:pattern()],  % set at start: {{M, '_', '_'}, MS}
               %% The same for kprof_guard: {module, M, MS, [local], Sentinel}.
               full_watch = [] :: [kprof_guard:pattern()],
               sample = 1.0 :: number(),
               max_overhead :: undefined | number(),
               %% kprof_tiers_cost:calibrate/1's, at start.
               calibration = #{} :: map(),
               window :: undefined | number(),    % seconds
               slow_max = 20 :: non_neg_integer(),
               limits = #{} :: map(),              % kprof_guard's, given ones only
               %% The sink's event count before the flags were set, when a
               %% limit counts events (kprof_guard:events_baseline/1).
               events0 :: undefined | non_neg_integer(),
               nodes = [] :: [node()],
               %% Where the tracing is set (kprof_trace_session), from the
               %% start's session step: the server's plan holds it alive.
               session :: undefined | kprof_trace_session:session(),
               %% How requests are marked (kprof_tiers_trace's session step):
               %% records the request path writes into the tracer NIF's ring
               %% for generation Gen, or traced calls of kprof_mark (the port
               %% tracer).
               marks = traced :: traced | {ring, pos_integer()}}).
