%%% @doc The shop's database tier: a pool of worker processes, each with
%%% its own connection, and the queries the pages need.
%%%
%%% The HTTP handlers call {@link user/1}, {@link report/0} and
%%% {@link catalog/1} in the request's process; each is a
%%% `gen_server:call/3' to one worker of the pool (round robin), which runs
%%% the SQL on its connection and answers rows as maps. A request thus
%%% crosses processes: the handler, a pool worker, and the SQLite driver's
%%% owner process (`sqlite3', from Debian's `erlang-p1-sqlite3'), or a
%%% PostgreSQL connection process (`pgsql', from `erlang-p1-pgsql').
%%%
%%% The backend is chosen by {@link shop:start/1}: `sqlite' (a file) or
%%% `{postgres, Conninfo}'. Queries are written once, with `?'
%%% placeholders; PostgreSQL gets them numbered (`$1').
%%%
%%% Work done per row (rows into maps) is in {@link shop_rows}: a kprof
%%% tier `{shop_db, '_', '_'}' then costs a few trace messages per query,
%%% not one per row (a list comprehension is a function called once per
%%% element).
-module(shop_db).
-behaviour(gen_server).

%% QUERIES (called by shop_http, in the request's process)
-export([user/1, report/0, catalog/1]).
%% POOL (started by shop_sup)
-export([start_link/2, worker_name/1, pool_init/1, pool_stop/0]).
%% CONNECTIONS (also used by shop_seed)
-export([connect/2, disconnect/1, exec/2, query/3]).
%% gen_server
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-export_type([backend/0, conn/0, row/0]).

-type backend() :: {sqlite, file:filename()}
                 | {postgres, #{host => string(), port => inet:port_number(),
                                database => string(), user => string(),
                                password => string()}}.
-type conn() :: {sqlite, atom()} | {postgres, pid()}.
-type row() :: #{binary() => term()}.

-define(POOL, {?MODULE, pool}).
-define(CALL_TIMEOUT, 15000).

%%%%%%%%%%%%%%%
%%% QUERIES %%%
%%%%%%%%%%%%%%%

%% @doc One user and their last five orders: a primary-key lookup and an
%% index range; the cheap query.
-spec user(integer()) -> {ok, row(), [row()]} | not_found.
user(Id) when is_integer(Id) ->
    call({user, Id}).

%% @doc Sales per category and the ten best customers: two aggregates
%% over every order (a full scan of the orders table each); the heavy
%% query.
-spec report() -> {ok, [row()], [row()]}.
report() ->
    call(report).

%% @doc The first `Limit' products by category and name.
-spec catalog(pos_integer()) -> {ok, [row()]}.
catalog(Limit) when is_integer(Limit), Limit > 0 ->
    call({catalog, Limit}).

%%%%%%%%%%%%
%%% POOL %%%
%%%%%%%%%%%%

%% @doc Start worker `N' of the pool on `Backend', registered as
%% {@link worker_name/1}.
-spec start_link(backend(), pos_integer()) -> {ok, pid()} | {error, term()}.
start_link(Backend, N) ->
    gen_server:start_link({local, worker_name(N)}, ?MODULE, {Backend, N}, []).

%% @doc The registered name of worker `N': `shop_db_N'.
-spec worker_name(pos_integer()) -> atom().
worker_name(N) ->
    list_to_atom("shop_db_" ++ integer_to_list(N)).

%% @doc Make the pool of `Size' workers known to {@link user/1} and the
%% other queries (before its workers start).
-spec pool_init(pos_integer()) -> ok.
pool_init(Size) ->
    Names = list_to_tuple([worker_name(N) || N <- lists:seq(1, Size)]),
    persistent_term:put(?POOL, {Names, counters:new(1, [write_concurrency])}).

%% @doc Forget the pool.
-spec pool_stop() -> ok.
pool_stop() ->
    _ = persistent_term:erase(?POOL),
    ok.

%%%%%%%%%%%%%%%%%%%
%%% CONNECTIONS %%%
%%%%%%%%%%%%%%%%%%%

%% @doc Open a connection; `Name' names a SQLite connection's owner
%% process.
-spec connect(backend(), atom()) -> {ok, conn()} | {error, term()}.
connect({sqlite, File}, Name) ->
    case sqlite3:open(Name, [{file, File}]) of
        {ok, _} -> {ok, {sqlite, Name}};
        {error, _} = Error -> Error
    end;
connect({postgres, Info}, _Name) ->
    {ok, _} = application:ensure_all_started(p1_pgsql),
    case pgsql:connect(maps:get(host, Info, "127.0.0.1"), maps:get(database, Info, "shop"),
                       maps:get(user, Info, "shop"), maps:get(password, Info, ""),
                       maps:get(port, Info, 5432)) of
        {ok, Pid} -> {ok, {postgres, Pid}};
        {error, _} = Error -> Error
    end.

%% @doc Close a connection.
-spec disconnect(conn()) -> ok.
disconnect({sqlite, Name}) ->
    _ = sqlite3:close(Name),
    ok;
disconnect({postgres, Pid}) ->
    _ = pgsql:terminate(Pid),
    ok.

%% @doc Run statements that return no rows (a script: `;' between them).
-spec exec(conn(), iodata()) -> ok | {error, term()}.
exec({sqlite, Name}, Sql) ->
    Results = sqlite3:sql_exec_script_timeout(Name, Sql, ?CALL_TIMEOUT),
    case [E || {error, _, _} = E <- lists:flatten([Results])] of
        [] -> ok;
        [E | _] -> {error, E}
    end;
exec({postgres, Pid}, Sql) ->
    case pgsql:squery(Pid, Sql, ?CALL_TIMEOUT) of
        {ok, Results} ->
            case [E || {error, _} = E <- Results] of
                [] -> ok;
                [E | _] -> E
            end;
        Error ->
            {error, Error}
    end.

%% @doc Run one query with `?' placeholders; rows as maps with binary
%% column names.
-spec query(conn(), iodata(), [term()]) -> [row()].
query({sqlite, Name}, Sql, Params) ->
    case sqlite3:sql_exec_timeout(Name, Sql, Params, ?CALL_TIMEOUT) of
        [{columns, Cols}, {rows, Rows}] -> shop_rows:to_maps(Cols, Rows);
        ok -> [];
        Error -> error({sqlite, Error, iolist_to_binary(Sql)})
    end;
query({postgres, Pid}, Sql, Params) ->
    case pgsql:pquery(Pid, shop_rows:numbered(iolist_to_binary(Sql)), Params) of
        {ok, _Tag, _Status, Cols, Rows} -> shop_rows:from_pgsql(Cols, Rows);
        Error -> error({postgres, Error, iolist_to_binary(Sql)})
    end.

%%%%%%%%%%%%%%%%%%
%%% gen_server %%%
%%%%%%%%%%%%%%%%%%

%% @private
-spec init({backend(), pos_integer()}) -> {ok, conn()} | {stop, term()}.
init({Backend, N}) ->
    process_flag(trap_exit, true),
    case connect(Backend, list_to_atom("shop_db_conn_" ++ integer_to_list(N))) of
        {ok, Conn} -> {ok, Conn};
        {error, Reason} -> {stop, {connect, Reason}}
    end.

%% @private
%% PostgreSQL's answers come from p1_pgsql's socket process, which never
%% saw the caller's seq_trace token, and a process that receives a message
%% without a token loses its own. The worker puts the caller's token back
%% before replying, so the caller keeps it too (kprof follows a request by
%% that token; without this, the templating of a page rendered after a
%% PostgreSQL query would not be seen).
-spec handle_call(term(), gen_server:from(), conn()) -> {reply, term(), conn()}.
handle_call(Query, _From, Conn) ->
    Token = seq_trace:get_token(),
    Reply = run(Conn, Query),
    _ = seq_trace:set_token(Token),
    {reply, Reply, Conn}.

%% @private
-spec handle_cast(term(), conn()) -> {noreply, conn()}.
handle_cast(_, Conn) ->
    {noreply, Conn}.

%% @private
-spec handle_info(term(), conn()) -> {noreply, conn()}.
handle_info(_, Conn) ->
    {noreply, Conn}.

%% @private
-spec terminate(term(), conn()) -> ok.
terminate(_, Conn) ->
    disconnect(Conn).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec call(term()) -> term().
call(Query) ->
    {Names, Counter} = persistent_term:get(?POOL),
    ok = counters:add(Counter, 1, 1),
    Worker = element(1 + counters:get(Counter, 1) rem tuple_size(Names), Names),
    gen_server:call(Worker, Query, ?CALL_TIMEOUT).

-spec run(conn(), term()) -> term().
run(Conn, {user, Id}) -> run_user(Conn, Id);
run(Conn, report) -> run_report(Conn);
run(Conn, {catalog, Limit}) -> run_catalog(Conn, Limit).

-spec run_user(conn(), integer()) -> {ok, row(), [row()]} | not_found.
run_user(Conn, Id) ->
    case query(Conn, "SELECT id, name, email, city, joined FROM users WHERE id = ?", [Id]) of
        [User] ->
            Orders = query(Conn,
                           "SELECT o.id, p.name AS product, o.qty, o.day, "
                           "o.qty * p.price_cents AS total_cents "
                           "FROM orders o JOIN products p ON p.id = o.product_id "
                           "WHERE o.user_id = ? ORDER BY o.day DESC, o.id DESC LIMIT 5",
                           [Id]),
            {ok, User, Orders};
        [] ->
            not_found
    end.

-spec run_report(conn()) -> {ok, [row()], [row()]}.
run_report(Conn) ->
    ByCategory = query(Conn,
                       "SELECT p.category, count(*) AS orders, sum(o.qty) AS items, "
                       "sum(o.qty * p.price_cents) AS revenue_cents "
                       "FROM orders o JOIN products p ON p.id = o.product_id "
                       "GROUP BY p.category ORDER BY revenue_cents DESC", []),
    Best = query(Conn,
                 "SELECT u.id, u.name, u.city, b.orders, b.spent_cents "
                 "FROM (SELECT o.user_id, count(*) AS orders, "
                 "      sum(o.qty * p.price_cents) AS spent_cents "
                 "      FROM orders o JOIN products p ON p.id = o.product_id "
                 "      GROUP BY o.user_id ORDER BY spent_cents DESC LIMIT 10) b "
                 "JOIN users u ON u.id = b.user_id ORDER BY b.spent_cents DESC, u.id", []),
    {ok, ByCategory, Best}.

-spec run_catalog(conn(), pos_integer()) -> {ok, [row()]}.
run_catalog(Conn, Limit) ->
    {ok, query(Conn,
               "SELECT id, name, category, price_cents, stock, description "
               "FROM products ORDER BY category, name, id LIMIT ?", [Limit])}.
