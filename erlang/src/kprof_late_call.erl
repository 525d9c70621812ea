%%% @doc A call to one of kprof's servers that says when it is late.
%%%
%%% Some of kprof's servers wait on the VM itself: a pattern set or cleared
%%% on every module, or a trace session destroyed, waits for every
%%% scheduler, and for the code permission another process may hold while
%%% it sets its own patterns. On a machine whose CPUs are taken by others
%%% that is seconds, not milliseconds. A caller that gave up after
%%% gen_server's 5 s would crash, while the work it asked for still runs.
%%%
%%% {@link call/4} waits `LateMs', then logs where the server is
%%% ({@link say/3}), then waits for the rest of its timeout
%%% (kprof_flame_srv's calls and every call to kprof_guard: 5 s, then 60 s
%%% in all).
%%%
%%% The error {@link say/3} logs, at most once every 10 s per server and
%%% kind of request (its name: the atom, or a tuple's first element):
%%% "`Server': its server (`Pid') did not answer `Request' within `Ms' ms:"
%%% then the server's `status', `message_queue_len' and
%%% `current_stacktrace', also in the event's metadata under
%%% `kprof_server_late', with `server => Server'.
-module(kprof_late_call).

-export([call/4, say/3]).

%% At most one error of say/3 this often, per server and kind of request.
-define(GAP_MS, 10000).

%% @doc `Request' to the server registered as `Server': its reply, or
%% `{error, timeout}' after `TimeoutMs' in all (said after `LateMs'),
%% `{error, not_running}' when there is no such server, `{error,
%% {not_running, Reason}}' when it went down before it answered.
-spec call(atom(), term(), non_neg_integer(), timeout()) -> term().
call(Server, Request, LateMs, TimeoutMs) ->
    try gen_server:send_request(Server, Request) of
        ReqId ->
            Answer = case gen_server:wait_response(ReqId, LateMs) of
                         timeout ->
                             say(Server, Request, LateMs),
                             gen_server:receive_response(ReqId, rest(TimeoutMs, LateMs));
                         Early ->
                             Early
                     end,
            case Answer of
                {reply, Reply} -> Reply;
                timeout -> {error, timeout};
                {error, {noproc, _}} -> {error, not_running};
                {error, {Reason, _}} -> {error, {not_running, Reason}}
            end
    catch
        %% (send_request/2 to a name not registered.)
        error:badarg -> {error, not_running}
    end.

%% @doc The server registered as `Server' has not answered `Request' in
%% `Ms': an error, at most once every 10 s per server and kind of request
%% (a stuck server's every caller must not flood the log, and a late
%% `status' must not hide a late `abort'), with the server's
%% status, where it is and the messages waiting for it (also in the event's
%% metadata, under `kprof_server_late', with `server => Server'). Called by
%% the caller, whose call timed out or is still waiting.
-spec say(atom(), term(), non_neg_integer()) -> ok.
say(Server, Request, Ms) ->
    case whereis(Server) of
        undefined ->
            ok;
        Pid ->
            case once_in({Server, kind(Request)}, ?GAP_MS) of
                true ->
                    Info = maps:from_list(
                             case erlang:process_info(Pid, [status, message_queue_len,
                                                            current_stacktrace]) of
                                 undefined -> [];
                                 L -> L
                             end),
                    logger:error("~p: its server (~p) did not answer ~0P within ~b ms: ~0P",
                                 [Server, Pid, Request, 8, Ms, Info, 40],
                                 #{kprof_server_late => Info#{server => Server}});
                false ->
                    ok
            end
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec kind(term()) -> term().
kind(Request) when is_tuple(Request), tuple_size(Request) > 0 -> element(1, Request);
kind(Request) -> Request.

-spec rest(timeout(), non_neg_integer()) -> timeout().
rest(infinity, _LateMs) -> infinity;
rest(TimeoutMs, LateMs) -> max(0, TimeoutMs - LateMs).

%% Whether GapMs have passed since the last time this said true for Key
%% (callers in any process: the time is kept in an atomics array, made once
%% per key).
-spec once_in(term(), pos_integer()) -> boolean().
once_in(Key, GapMs) ->
    Ref = case persistent_term:get({?MODULE, Key}, undefined) of
              undefined ->
                  A = atomics:new(1, [{signed, true}]),
                  ok = atomics:put(A, 1, erlang:monotonic_time(millisecond) - GapMs),
                  persistent_term:put({?MODULE, Key}, A),
                  persistent_term:get({?MODULE, Key});
              A ->
                  A
          end,
    Now = erlang:monotonic_time(millisecond),
    Last = atomics:get(Ref, 1),
    Now - Last >= GapMs andalso atomics:compare_exchange(Ref, 1, Last, Now) =:= ok.
