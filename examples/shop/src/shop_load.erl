%%% @doc A load generator for the shop: HTTP GETs to 127.0.0.1 at a steady
%%% rate, for a bounded time and number of requests, then req/s and
%%% latency percentiles.
%%%
%%% ```
%%% 1> R = shop_load:run(#{port => shop:port(), rate => 100, duration_ms => 2000}).
%%% 2> shop_load:print(R).
%%% load: 200 requests in 2.00 s, 100.0 req/s (asked 100), 200 ok, 0 failed, 0 not sent
%%% latency ms      requests   p50     p90     p99     max
%%% all                  200   1.31    14.2    181     190
%%% ...
%%% '''
%%% The rate is kept whatever the latency (an open loop): request `I' is
%%% sent at `I / rate' seconds, each in its own process over its own
%%% connection (`Connection: close'), at most `concurrency' at once; a
%%% request due while that many are in flight is not sent and counted as
%%% `not_sent'. Paths are drawn by weight; `:id' in a path is replaced by
%%% a random integer in `1..ids'.
-module(shop_load).

-export([run/1, print/1, get/2]).

-export_type([opts/0, result/0]).

-type opts() :: #{port := inet:port_number(),
                  rate => pos_integer(),          % requests per second: 50 (at most 5000)
                  duration_ms => pos_integer(),   % 3000 (at most 60000)
                  max_requests => pos_integer(),  % rate * duration (at most 100000)
                  concurrency => pos_integer(),   % in flight at most: 50 (at most 500)
                  timeout_ms => pos_integer(),    % per request: 10000
                  paths => [{pos_integer(), string()}], % weights and paths
                  ids => pos_integer()}.          % :id in 1..ids: 2000
-type stats() :: #{n := non_neg_integer(), p50 := float(), p90 := float(),
                   p99 := float(), max := float()}.
-type result() :: #{requests := non_neg_integer(), ok := non_neg_integer(),
                    failed := non_neg_integer(), not_sent := non_neg_integer(),
                    elapsed_ms := float(), rate := float(), asked_rate := pos_integer(),
                    latency := stats(), by_path := [{string(), stats()}],
                    statuses := #{term() => pos_integer()}}.

-define(DEFAULT_PATHS, [{60, "/users/:id"}, {35, "/catalog"}, {5, "/report"}]).

%%%%%%%%%%%%%%
%%% PUBLIC %%%
%%%%%%%%%%%%%%

%% @doc Run the load and wait for every request sent; see the module doc.
-spec run(opts()) -> result().
run(#{port := Port} = Opts) when is_integer(Port), Port > 0, Port < 65536 ->
    Rate = clamp(maps:get(rate, Opts, 50), 5000),
    Duration = clamp(maps:get(duration_ms, Opts, 3000), 60000),
    Max = clamp(maps:get(max_requests, Opts, max(1, Rate * Duration div 1000)), 100000),
    Paths = maps:get(paths, Opts, ?DEFAULT_PATHS),
    true = Paths =/= [] andalso lists:all(fun({W, P}) -> is_integer(W) andalso W > 0
                                                             andalso is_list(P) end, Paths),
    Cfg = #{port => Port, rate => Rate, max => Max,
            interval_us => 1000000 / Rate,
            concurrency => clamp(maps:get(concurrency, Opts, 50), 500),
            timeout => clamp(maps:get(timeout_ms, Opts, 10000), 60000),
            paths => Paths, total_weight => lists:sum([W || {W, _} <- Paths]),
            ids => clamp(maps:get(ids, Opts, 2000), 1 bsl 30)},
    T0 = now_us(),
    State = send_loop(Cfg, #{t0 => T0, until => T0 + Duration * 1000, sent => 0,
                              not_sent => 0, inflight => #{}, done => []}),
    finish(Cfg, State, now_us() - T0).

%% @doc Print a result of {@link run/1}.
-spec print(result()) -> ok.
print(#{requests := N, ok := Ok, failed := Failed, not_sent := NotSent, elapsed_ms := Ms,
        rate := Rate, asked_rate := Asked, latency := All, by_path := ByPath}) ->
    io:format("load: ~b requests in ~.2f s, ~.1f req/s (asked ~b), ~b ok, ~b failed, "
              "~b not sent~n", [N, Ms / 1000, Rate, Asked, Ok, Failed, NotSent]),
    io:format("latency ms      requests   p50     p90     p99     max~n"),
    [io:format("~-15s ~8b   ~-7s ~-7s ~-7s ~s~n",
               [Name, Count, ms(P50), ms(P90), ms(P99), ms(Max)])
     || {Name, #{n := Count, p50 := P50, p90 := P90, p99 := P99, max := Max}}
            <- [{"all", All} | ByPath], Count > 0],
    ok.

%% @doc One GET of `Path' on 127.0.0.1:`Port': `{Status, Body}' or
%% `{error, Reason}'.
-spec get(inet:port_number(), string()) -> {integer(), binary()} | {error, term()}.
get(Port, Path) ->
    request(Port, Path, 10000).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

%% Send request `sent' at t0 + sent * interval, until the time or the
%% count is up; collect answers meanwhile.
-spec send_loop(map(), map()) -> map().
send_loop(#{max := Max}, #{sent := Sent, not_sent := NS} = S) when Sent + NS >= Max ->
    S;
send_loop(Cfg, #{t0 := T0, until := Until, sent := Sent, not_sent := NS} = S) ->
    Now = now_us(),
    Due = T0 + round((Sent + NS) * maps:get(interval_us, Cfg)),
    if
        Due >= Until ->
            S;
        Now >= Due ->
            send_loop(Cfg, launch(Cfg, S));
        true ->
            receive
                {done, _, _, _, _} = Done -> send_loop(Cfg, collect(Done, S))
            after (Due - Now) div 1000 ->
                    send_loop(Cfg, S)
            end
    end.

-spec launch(map(), map()) -> map().
launch(#{concurrency := C}, #{inflight := In, not_sent := NS} = S) when map_size(In) >= C ->
    S#{not_sent := NS + 1};
launch(#{port := Port, timeout := Timeout} = Cfg, #{inflight := In, sent := Sent} = S) ->
    {Name, Path} = pick_path(Cfg),
    Self = self(),
    {Pid, _} = spawn_monitor(fun() ->
                                     T = now_us(),
                                     R = request(Port, Path, Timeout),
                                     Self ! {done, self(), Name, status(R), now_us() - T}
                             end),
    S#{inflight := In#{Pid => Name}, sent := Sent + 1}.

-spec collect(tuple(), map()) -> map().
collect({done, Pid, Name, Status, Us}, #{inflight := In, done := Done} = S) ->
    receive {'DOWN', _, process, Pid, _} -> ok end,
    S#{inflight := maps:remove(Pid, In), done := [{Name, Status, Us} | Done]};
collect({'DOWN', _, process, Pid, Reason}, #{inflight := In, done := Done} = S) ->
    %% Died before answering (cannot happen unless killed).
    S#{inflight := maps:remove(Pid, In),
       done := [{maps:get(Pid, In, "?"), {crashed, Reason}, 0} | Done]}.

-spec finish(map(), map(), integer()) -> result().
finish(#{timeout := Timeout} = Cfg, #{inflight := In} = S, _) when map_size(In) > 0 ->
    receive
        {done, _, _, _, _} = Done -> finish(Cfg, collect(Done, S), 0);
        {'DOWN', _, process, _, _} = Down -> finish(Cfg, collect(Down, S), 0)
    after Timeout + 1000 ->
            [exit(P, kill) || P <- maps:keys(In)],
            finish(Cfg, S#{inflight := #{}}, 0)
    end;
finish(#{rate := Asked}, #{t0 := T0, done := Done, not_sent := NS}, _) ->
    ElapsedUs = now_us() - T0,
    Ok = [D || {_, 200, _} = D <- Done],
    Statuses = lists:foldl(fun({_, St, _}, Acc) -> maps:update_with(St, fun(N) -> N + 1 end,
                                                                    1, Acc) end,
                           #{}, Done),
    Answered = [D || {_, St, _} = D <- Done, is_integer(St)],
    Names = lists:usort([N || {N, _, _} <- Done]),
    #{requests => length(Done), ok => length(Ok), failed => length(Done) - length(Ok),
      not_sent => NS, elapsed_ms => ElapsedUs / 1000,
      rate => length(Done) / max(ElapsedUs, 1) * 1000000, asked_rate => Asked,
      latency => stats([Us || {_, _, Us} <- Answered]),
      by_path => [{N, stats([Us || {N1, _, Us} <- Answered, N1 =:= N])} || N <- Names],
      statuses => Statuses}.

-spec stats([non_neg_integer()]) -> stats().
stats([]) ->
    #{n => 0, p50 => 0.0, p90 => 0.0, p99 => 0.0, max => 0.0};
stats(Us) ->
    Sorted = list_to_tuple(lists:sort(Us)),
    N = tuple_size(Sorted),
    Q = fun(P) -> element(max(1, min(N, ceil(P * N))), Sorted) / 1000 end,
    #{n => N, p50 => Q(0.5), p90 => Q(0.9), p99 => Q(0.99), max => element(N, Sorted) / 1000}.

-spec pick_path(map()) -> {string(), string()}.
pick_path(#{paths := Paths, total_weight := Total, ids := Ids}) ->
    Name = weighted(rand:uniform(Total), Paths),
    Path = string:replace(Name, ":id", integer_to_list(rand:uniform(Ids)), all),
    {Name, lists:flatten(Path)}.

-spec weighted(pos_integer(), [{pos_integer(), string()}]) -> string().
weighted(R, [{W, P} | _]) when R =< W -> P;
weighted(R, [{W, _} | Rest]) -> weighted(R - W, Rest).

%% One request over its own connection to 127.0.0.1.
-spec request(inet:port_number(), string(), pos_integer()) ->
          {integer(), binary()} | {error, term()}.
request(Port, Path, Timeout) ->
    Deadline = now_us() + Timeout * 1000,
    case gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {packet, raw}],
                         Timeout) of
        {ok, Sock} ->
            try
                ok = gen_tcp:send(Sock, ["GET ", Path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                         "Connection: close\r\n\r\n"]),
                parse(recv_all(Sock, Deadline, []))
            after
                gen_tcp:close(Sock)
            end;
        {error, _} = Error ->
            Error
    end.

-spec recv_all(gen_tcp:socket(), integer(), [binary()]) -> binary() | {error, term()}.
recv_all(Sock, Deadline, Acc) ->
    case gen_tcp:recv(Sock, 0, max(0, (Deadline - now_us()) div 1000)) of
        {ok, Data} -> recv_all(Sock, Deadline, [Data | Acc]);
        {error, closed} -> iolist_to_binary(lists:reverse(Acc));
        {error, _} = Error -> Error
    end.

-spec parse(binary() | {error, term()}) -> {integer(), binary()} | {error, term()}.
parse(<<"HTTP/1.", _, " ", Code:3/binary, _/binary>> = Resp) ->
    Body = case binary:split(Resp, <<"\r\n\r\n">>) of
               [_, B] -> B;
               [_] -> <<>>
           end,
    {binary_to_integer(Code), Body};
parse({error, _} = Error) ->
    Error;
parse(Other) ->
    {error, {bad_response, Other}}.

-spec status({integer(), binary()} | {error, term()}) -> integer() | {error, term()}.
status({error, _} = Error) -> Error;
status({Code, _}) -> Code.

-spec clamp(term(), pos_integer()) -> pos_integer().
clamp(N, Max) when is_integer(N), N > 0 -> min(N, Max);
clamp(N, _) -> error({badarg, N}).

-spec ms(float()) -> string().
ms(X) when X >= 100 -> integer_to_list(round(X));
ms(X) when X >= 10 -> float_to_list(X, [{decimals, 1}]);
ms(X) -> float_to_list(X, [{decimals, 2}]).

-spec now_us() -> integer().
now_us() ->
    erlang:monotonic_time(microsecond).
