%%% @doc What each kprof server has set in the VM, written down where its
%%% death cannot take it: an ETS table owned by `kprof_sup'.
%%%
%%% A server that sets trace patterns, trace flags or a ring session writes
%%% a record of them here before it sets them, and clears it once they are
%%% off. When the server is killed, `kprof_sup' restarts it, and its
%%% `init/1' finds the record its previous incarnation left and undoes what
%%% it says (patterns, `on_load', meta patterns, flags), so nothing kprof
%%% set outlives the process that set it. `kprof_guard' keeps its armed
%%% modes here too, so a restarted guard goes on guarding them.
%%%
%%% The table lives as long as the supervisor, i.e. the application: when
%%% kprof stops, every server's `terminate/2' has already turned its own
%%% tracing off.
-module(kprof_records).

-export([new/0, put/2, get/1, delete/1]).

-define(TABLE, kprof_records).

%% @doc Creates the table; called by `kprof_sup:init/1', in the supervisor.
-spec new() -> ok.
new() ->
    _ = ets:new(?TABLE, [set, public, named_table, {read_concurrency, true}]),
    ok.

%% @doc Writes `Server''s record (any term), replacing the one before.
-spec put(atom(), term()) -> ok.
put(Server, Record) when is_atom(Server) ->
    try ets:insert(?TABLE, {Server, Record}) of
        true -> ok
    catch
        error:badarg -> ok   % no supervisor (a server started by hand, in a test)
    end.

%% @doc `Server''s record, or `undefined'.
-spec get(atom()) -> term() | undefined.
get(Server) when is_atom(Server) ->
    try ets:lookup(?TABLE, Server) of
        [{_, Record}] -> Record;
        [] -> undefined
    catch
        error:badarg -> undefined
    end.

%% @doc Forgets `Server''s record.
-spec delete(atom()) -> ok.
delete(Server) when is_atom(Server) ->
    try ets:delete(?TABLE, Server) of
        true -> ok
    catch
        error:badarg -> ok
    end.
