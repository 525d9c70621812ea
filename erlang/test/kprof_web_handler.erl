%%% @doc An httpd module for the web tests: after kprof_tiers_httpd in the
%%% chain, it does some tier work and answers.
-module(kprof_web_handler).

-include_lib("inets/include/httpd.hrl").

-export([do/1]).

%% @doc Sleeps 2 ms in a tier function, then answers 200 "hello"; a
%% request for "/crash" raises.
-spec do(#mod{}) -> {proceed, list()}.
do(#mod{request_uri = "/crash" ++ _}) ->
    error(crash);
do(#mod{data = Data}) ->
    kprof_tiers_work:sleep_a(2),
    Body = "hello",
    {proceed, [{response, {response, [{code, 200}, {content_type, "text/plain"},
                                      {content_length, integer_to_list(length(Body))}],
                           Body}} | Data]}.
