%%% @doc A flame graph of one mochiweb request, asked for by the request
%%% itself: the mochiweb adapter of {@link kprof_flame_web} (which says what
%%% a request asks and what the gate, {@link kprof_web_gate}, lets it have).
%%%
%%% ```
%%% Loop = kprof_flame_mochiweb:loop(fun my_app:loop/1, #{}),
%%% mochiweb_http:start([{name, shop}, {port, 8080}, {loop, Loop}]).
%%% '''
-module(kprof_flame_mochiweb).

-export([loop/2]).

-define(FORWARD_HEADERS, ["x-forwarded-for", "x-real-ip", "forwarded"]).

%% @doc A mochiweb loop fun that runs `Loop(Req)' traced when the request
%% asks for it and the gate lets it. Bad options raise
%% `error({bad_options, Reason})' here, not at each request.
-spec loop(fun((term()) -> term()), kprof_flame:opts()) -> fun((term()) -> term()).
loop(Loop, Opts) when is_function(Loop, 1), is_map(Opts) ->
    case kprof_flame_options:validate(Opts, apply) of
        {ok, _} -> ok;
        {error, Bad} -> error({bad_options, Bad})
    end,
    fun(Req) ->
            Asked = mochiweb_request:get_header_value("x-trace-request", Req),
            case Asked =/= undefined andalso kprof_flame_web:decide(Asked, mochiweb_peer(Req)) of
                trace ->
                    Mode = kprof_flame_web:mode(mochiweb_request:get_header_value("x-kprof-sample",
                                                                                  Req)),
                    element(1, kprof_flame_web:run(fun() -> Loop(Req) end, Opts, Mode));
                {refused, Reason, true} -> kprof_flame_web:with_refusal(Reason, fun() -> Loop(Req) end);
                _ -> Loop(Req)
            end
    end.

-spec mochiweb_peer(term()) -> kprof_web_gate:peer().
mochiweb_peer(Req) ->
    %% The socket's peer, not mochiweb_request:get(peer): that one believes a
    %% loopback client's x-forwarded-for.
    IP = try mochiweb_socket:peername(mochiweb_request:get(socket, Req)) of
             {ok, {Addr, _Port}} -> Addr;
             _ -> undefined
         catch
             _:_ -> undefined
         end,
    {IP, lists:any(fun(H) -> mochiweb_request:get_header_value(H, Req) =/= undefined end,
                   ?FORWARD_HEADERS)}.
