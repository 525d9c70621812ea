%%% @doc `make demo': the shop under load, profiled by kprof, every step
%%% printed as the shell command that does it.
%%%
%%% ```
%%% erl -noshell -pa erlang/ebin -pa _build/shop/ebin -eval 'shop_demo:main()'
%%% '''
%%% Starts the shop on a free port of 127.0.0.1, loads it without kprof,
%%% again with tiers (http, database, templating), prints the tier report,
%%% captures a flame graph of one `GET /report', samples the whole node
%%% under load for a sampled flame graph beside it (scripts/demo.sh starts
%%% the VM with `+JPperf map'), stops everything and halts the VM (status 1
%%% if a step failed, or after `?DEADLINE_MS').
-module(shop_demo).

-export([main/0, main/1, tiers/0, tier_opts/0]).

-define(DEADLINE_MS, 55000).
-define(FLAME_DIR, "_build/demo/flame").

%% @equiv main(#{})
-spec main() -> no_return().
main() ->
    main(#{}).

%% @doc Run the demo and halt. Options: `rate' (req/s, 60) and
%% `duration_ms' (of each load, 3000).
-spec main(map()) -> no_return().
main(Opts) ->
    spawn_watchdog(),
    Status = try run(Opts) of
                 ok -> 0
             catch
                 Class:Reason:Stack ->
                     io:format("~ndemo failed: ~p:~p~n  ~p~n", [Class, Reason, Stack]),
                     1
             after
                 _ = shop:stop(),
                 _ = kprof:stop(),
                 %% The perf map +JPperf map made for step 8: nobody's after this VM.
                 _ = file:delete("/tmp/perf-" ++ os:getpid() ++ ".map")
             end,
    erlang:halt(Status).

%% @doc The tiers of the shop: its three tier modules.
-spec tiers() -> kprof_tiers:tiers().
tiers() ->
    [{http, [{shop_http, '_', '_'}]},
     {database, [{shop_db, '_', '_'}]},
     {templating, [{shop_tpl, '_', '_'}]}].

%% @doc A request begins at `shop_http:handle/3', its route (first
%% argument) is its identity; the three slowest requests of 100 ms or
%% more are listed.
-spec tier_opts() -> kprof_tiers:opts().
tier_opts() ->
    #{entry => {shop_http, handle, 3}, identity => {arg, 1}, slow_ms => 100, slow_max => 3}.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec run(map()) -> ok.
run(Opts) ->
    Rate = maps:get(rate, Opts, 60),
    Duration = maps:get(duration_ms, Opts, 3000),
    T0 = erlang:monotonic_time(millisecond),
    io:format("kprof demo: a web shop (mochiweb, SQLite, bbmustache) under load, "
              "profiled by tiers~n~n"),

    step("1> shop:start()."),
    {ok, #{port := Port}} = Started = shop:start(),
    io:format("~p~n", [Started]),
    UserMs = idle_user_ms(),

    Load = #{port => Port, rate => Rate, duration_ms => Duration},
    step(io_lib:format("2> shop_load:print(shop_load:run(~s)).   % without kprof",
                       [show(Load)])),
    ok = shop_load:print(shop_load:run(Load)),

    step(io_lib:format("3> kprof:start_tiers(~s,~n                      ~s).",
                       [show(tiers()), show(tier_opts())])),
    ok = kprof:start_tiers(tiers(), tier_opts()),
    io:format("ok~n"),

    step(io_lib:format("4> shop_load:print(shop_load:run(~s)).   % with tiers on",
                       [show(Load)])),
    ok = shop_load:print(shop_load:run(Load)),

    step("5> kprof:report()."),
    ok = kprof:report(),
    {ok, Report} = kprof:report(#{format => term}),
    answer(Report, UserMs),
    step("6> kprof:stop_tiers()."),
    ok = kprof:stop_tiers(),
    io:format("ok~n"),

    flame(Port),
    sampled(Load),

    step("9> shop:stop(), kprof:stop()."),
    ok = shop:stop(),
    ok = kprof:stop(),
    io:format("ok~n~ndemo done in ~.1f s~n",
              [(erlang:monotonic_time(millisecond) - T0) / 1000]).

%% What shop_db:user/1 takes with nothing else running: the median of 21
%% calls, in ms.
-spec idle_user_ms() -> float().
idle_user_ms() ->
    Us = lists:sort([element(1, timer:tc(shop_db, user, [N])) || N <- lists:seq(1, 21)]),
    lists:nth(11, Us) / 1000.

%% The table in words: where each route's time goes, and why /users/:id
%% is slow when its own query is fast.
-spec answer(map(), float()) -> ok.
answer(#{rows := Rows}, UserMs) ->
    io:format("~n   where each route's time goes (share of its mean wall time, self time "
              "per tier):~n"),
    [io:format("   ~-16s ~7s ms: ~s~n",
               [route(Id), kprof_report_render:format_ms(Wall),
                lists:join(", ", [io_lib:format("~s ~b%", [T, round(100 * M / Wall)])
                                  || {T, M} <- by_share(Tiers)])])
     || #{identity := Id, tiers := Tiers, wall := #{mean := Wall}} <- Rows, Wall > 0],
    case {tier_mean(Rows, {"GET", "/users/:id"}, database),
          tier_mean(Rows, {"GET", "/report"}, database)} of
        {UserDb, ReportDb} when is_float(UserDb), is_float(ReportDb), UserDb > 5 * UserMs ->
            io:format("~n   GET /users/:id is slow in the database tier (~s ms a request), yet "
                      "its query alone takes ~s ms~n"
                      "   (shop_db:user/1 on the idle shop): its requests wait for a pool "
                      "worker,~n   and GET /report holds one for ~s ms a request. "
                      "The flame graph below shows one /report.~n",
                      [kprof_report_render:format_ms(UserDb), kprof_report_render:format_ms(UserMs),
                       kprof_report_render:format_ms(ReportDb)]);
        _ ->
            ok
    end,
    ok.

-spec by_share([map()]) -> [{atom(), float()}].
by_share(Tiers) ->
    lists:reverse(lists:keysort(2, [{T, M} || #{tier := T, self := #{mean := M}} <- Tiers])).

-spec tier_mean([map()], term(), atom()) -> float() | undefined.
tier_mean(Rows, Id, Tier) ->
    case [M || #{identity := I, tiers := Ts} <- Rows, I =:= Id,
               #{tier := T, self := #{mean := M}} <- Ts, T =:= Tier] of
        [M] -> M;
        [] -> undefined
    end.

-spec route(term()) -> string().
route({Method, Path}) when is_list(Method), is_list(Path) -> Method ++ " " ++ Path;
route(Id) -> lists:flatten(io_lib:format("~0p", [Id])).

%% One GET /report, as a flame graph: flame_capture waits for the next
%% call of the handler while a process asks for the page.
-spec flame(inet:port_number()) -> ok.
flame(Port) ->
    _ = code:ensure_loaded(kprof),
    case erlang:function_exported(kprof, flame_capture, 3) of
        true ->
            Opts = #{output_directory => ?FLAME_DIR, output_format => [svg, speedscope],
                     timeout => 10000},
            step(io_lib:format("7> kprof:flame_capture({shop_http, report, 1}, 1, ~s).   "
                               "% while GET /report runs", [show(Opts)])),
            [file:delete(F) || F <- filelib:wildcard(filename:join(?FLAME_DIR, "kprof-*"))],
            Asker = spawn_link(fun() -> ask_report(Port) end),
            Result = kprof:flame_capture({shop_http, report, 1}, 1, Opts),
            unlink(Asker),
            exit(Asker, kill),
            {ok, _Files} = Result,
            io:format("~p~n", [Result]),
            io:format("   flame graph of one GET /report: open the .svg in a browser, or load "
                      "the .speedscope.json~n   at https://www.speedscope.app~n");
        false ->
            step("7> kprof:flame_capture({shop_http, report, 1}, 1, Opts)."),
            io:format("   flame graphs: not available in this build~n")
    end.

%% The whole node sampled while the shop is under load: a sampled flame
%% graph beside the traced one (doc/sampling.md). A node or a kernel that does
%% not allow it (no +JPperf map, the kernel's perf_event_paranoid) is said,
%% and the demo goes on.
-spec sampled(map()) -> ok.
sampled(Load) ->
    Opts = #{output_directory => ?FLAME_DIR, output_format => [svg, speedscope],
             group => initial_call, frequency => 997},
    step(io_lib:format("8> kprof:sample(~b, ~s).   % while ~s runs",
                       [maps:get(duration_ms, Load), show(Opts),
                        show({shop_load, run, [Load]})])),
    Loader = spawn_link(fun() -> shop_load:run(Load) end),
    Result = kprof:sample(maps:get(duration_ms, Load), Opts),
    unlink(Loader),
    exit(Loader, kill),
    io:format("~p~n", [Result]),
    case Result of
        {ok, _} ->
            io:format("   sampled flame graph of the shop under load, every process (the "
                      "CPU's view: Erlang and C code), beside the traced one~n");
        {error, _} ->
            io:format("   no sampled flame graph here (see doc/sampling.md for what it needs)~n")
    end.

%% GET /report every 100 ms until killed (the capture may start after the
%% first one).
-spec ask_report(inet:port_number()) -> no_return().
ask_report(Port) ->
    timer:sleep(100),
    _ = shop_load:get(Port, "/report"),
    ask_report(Port).

-spec step(iodata()) -> ok.
step(Command) ->
    io:format("~n~s~n", [Command]).

-spec show(term()) -> string().
show(Term) ->
    lists:flatten(io_lib:format("~0p", [Term])).

%% Halts the VM if the demo overruns its time.
-spec spawn_watchdog() -> pid().
spawn_watchdog() ->
    spawn(fun() ->
                  receive after ?DEADLINE_MS ->
                          io:format("~ndemo: still running after ~b s, stopping~n",
                                    [?DEADLINE_MS div 1000]),
                          erlang:halt(1)
                  end
          end).
