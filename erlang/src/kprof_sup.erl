%%% @doc kprof's top supervisor (one_for_one).
%%%
%%% Children, started in this order (and stopped in the reverse):
%%% <ol>
%%% <li>{@link kprof_sink}, the owner of the port to the C sink;</li>
%%% <li>{@link kprof_guard}, which watches the sink and the node and aborts
%%%     kprof's tracing on overload or at a limit;</li>
%%% <li>{@link kprof_tiers}, the server of tiered request profiling;</li>
%%% <li>{@link kprof_flame_srv}, the server of the flame captures.</li>
%%% </ol>
%%% Each registers under its module's name (kprof.app's `registered').
%%% The supervisor also owns the {@link kprof_records} table, where each
%%% child writes down what it has set in the VM so that a restarted child
%%% can undo what its killed predecessor left.
%%% The sink server restarts the port itself (5 times in 10 s); when it
%%% gives up and stops, this supervisor starts a fresh one, at most 3
%%% times a minute, after which the application stops.
-module(kprof_sup).
-behaviour(supervisor).

-export([start_link/0]).
-export([init/1]).

%% @doc Start the supervisor, registered as `kprof_sup'.
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @private
-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    %% Owned by this process: it outlives every child (kprof_records).
    ok = kprof_records:new(),
    Flags = #{strategy => one_for_one, intensity => 3, period => 60},
    Sink = #{id => kprof_sink,
             start => {kprof_sink, start_link, []},
             restart => permanent,
             shutdown => 5000,
             type => worker,
             modules => [kprof_sink]},
    %% After the sink: it watches it, and on shutdown turns kprof's tracing off first.
    Guard = #{id => kprof_guard,
              start => {kprof_guard, start_link, []},
              restart => permanent,
              shutdown => 5000,
              type => worker,
              modules => [kprof_guard]},
    %% TIERS: after the sink, so it stops (and turns its tracing off) first.
    Tiers = #{id => kprof_tiers,
              start => {kprof_tiers, start_link, []},
              restart => permanent,
              shutdown => 5000,
              type => worker,
              modules => [kprof_tiers]},
    %% FLAME: last, so it stops (and closes its captures) first.
    Flame = #{id => kprof_flame_srv,
              start => {kprof_flame_srv, start_link, []},
              restart => permanent,
              shutdown => 5000,
              type => worker,
              modules => [kprof_flame_srv]},
    {ok, {Flags, [Sink, Guard, Tiers, Flame]}}.
