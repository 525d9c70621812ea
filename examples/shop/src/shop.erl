%%% @doc A small web shop to profile with kprof: HTTP by mochiweb, data in
%%% SQLite (or PostgreSQL), pages by bbmustache, all from Debian's Erlang
%%% packages (`erlang-mochiweb', `erlang-p1-sqlite3', `erlang-bbmustache',
%%% `erlang-p1-pgsql').
%%%
%%% ```
%%% 1> {ok, #{url := Url}} = shop:start().
%%% {ok,#{backend => sqlite,port => 40123,seed_ms => 912,
%%%       url => "http://127.0.0.1:40123", ...}}
%%% 2> shop_load:print(shop_load:run(#{port => shop:port(), rate => 100, duration_ms => 2000})).
%%% '''
%%%
%%% Three pages with three costs:
%%% <ul>
%%% <li>`GET /users/:id': a user and their last orders: an indexed lookup,
%%%     a small template;</li>
%%% <li>`GET /report': sales per category and the best customers:
%%%     two aggregates over every order (50,000 by default);</li>
%%% <li>`GET /catalog': a few hundred products (option `catalog_size')
%%%     rendered on one page: a big template.</li>
%%% </ul>
%%% Processes: mochiweb runs each connection in its own process, which
%%% routes ({@link shop_web}) and handles ({@link shop_http}) the
%%% request; queries go to a pool of {@link shop_db} workers (gen_servers,
%%% each with its own connection); {@link shop_tpl} renders in the
%%% request's process. The three tier modules are `shop_http',
%%% `shop_db' and `shop_tpl'.
%%%
%%% The database is generated at every start ({@link shop_seed}, a fixed
%%% random seed): with SQLite in a new file under option `dir'
%%% (`_build/shop'), deleted by {@link stop/0} (or by the next start, if
%%% the VM ended without stopping the shop).
-module(shop).

-export([start/0, start/1, stop/0, port/0, url/0, config/1]).

-export_type([opts/0]).

-type opts() ::
        #{port => inet:port_number(),       % 0: a free port (default)
          db => sqlite | {postgres, map()}, % sqlite (default); see shop_db:backend()
          dir => file:filename(),           % SQLite file's directory: "_build/shop"
          pool_size => pos_integer(),       % database workers: 2
          users => pos_integer(),           % 2000
          products => pos_integer(),        % 400
          orders => pos_integer(),          % 50000
          catalog_size => pos_integer(),    % products on /catalog: 300
          templates => file:filename(),     % default: ../templates beside src/
          loop => plain | kprof_tiers_mochiweb}.  % plain (default)

-define(KEY, {?MODULE, config}).

%% @equiv start(#{})
-spec start() -> {ok, map()} | {error, term()}.
start() ->
    start(#{}).

%% @doc Seed the database, load the templates, start the pool and the
%% server on 127.0.0.1. Returns what it started: `url', `port',
%% `backend', `db_file' (SQLite), `seed_ms'.
-spec start(opts()) -> {ok, map()} | {error, term()}.
start(Opts) when is_map(Opts) ->
    case whereis(shop_sup) of
        undefined -> start_with(maps:merge(defaults(), Opts));
        _ -> {error, already_started}
    end.

%% @doc Stop the server and the pool, delete the SQLite file.
-spec stop() -> ok.
stop() ->
    case whereis(shop_sup) of
        undefined -> ok;
        Sup -> ok = gen_server:stop(Sup)
    end,
    ok = shop_db:pool_stop(),
    ok = shop_tpl:unload(),
    case persistent_term:get(?KEY, undefined) of
        #{db_file := File} ->
            [file:delete(File ++ Ext) || Ext <- ["", "-wal", "-shm", "-journal"]];
        _ ->
            ok
    end,
    _ = persistent_term:erase(?KEY),
    ok.

%% @doc The port the shop listens on.
-spec port() -> inet:port_number().
port() ->
    shop_web:port().

%% @doc `"http://127.0.0.1:Port"'.
-spec url() -> string().
url() ->
    "http://127.0.0.1:" ++ integer_to_list(port()).

%% @doc One setting of the running shop (see {@link opts()}).
-spec config(atom()) -> term().
config(Key) ->
    maps:get(Key, persistent_term:get(?KEY)).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec defaults() -> opts().
defaults() ->
    #{port => 0, db => sqlite, dir => "_build/shop", pool_size => 2, users => 2000,
      products => 400, orders => 50000, catalog_size => 300,
      templates => default, loop => plain}.

-spec start_with(map()) -> {ok, map()} | {error, term()}.
start_with(#{db := Db, dir := Dir, templates := Tpl} = Cfg0) ->
    Backend = case Db of
                  sqlite ->
                      File = filename:absname(filename:join(
                                                Dir, "shop-" ++ os:getpid() ++ "-"
                                                ++ integer_to_list(erlang:unique_integer([positive]))
                                                ++ ".db")),
                      ok = filelib:ensure_dir(File),
                      ok = remove_stale(filename:dirname(File)),
                      {sqlite, File};
                  {postgres, Info} when is_map(Info) ->
                      {postgres, Info}
              end,
    Cfg = case Backend of
              {sqlite, F} -> Cfg0#{backend => sqlite, db_file => F};
              {postgres, _} -> Cfg0#{backend => postgres}
          end,
    persistent_term:put(?KEY, Cfg),
    T0 = erlang:monotonic_time(millisecond),
    case seed(Backend, Cfg) of
        ok ->
            SeedMs = erlang:monotonic_time(millisecond) - T0,
            TplDir = case Tpl of default -> templates_dir(); _ -> Tpl end,
            case shop_tpl:load(TplDir, atom_to_binary(maps:get(backend, Cfg))) of
                ok -> start_sup(Backend, Cfg, SeedMs);
                Error -> stop(), Error
            end;
        Error ->
            stop(),
            Error
    end.

-spec start_sup(shop_db:backend(), map(), integer()) -> {ok, map()} | {error, term()}.
start_sup(Backend, #{pool_size := Size} = Cfg, SeedMs) ->
    ok = shop_db:pool_init(Size),
    case shop_sup:start_link(Cfg#{backend => Backend}) of
        {ok, Sup} ->
            %% The shell that started the shop may crash; the shop stays.
            unlink(Sup),
            Port = port(),
            {ok, maps:merge(maps:with([backend, db_file], Cfg),
                            #{url => url(), port => Port, seed_ms => SeedMs})};
        {error, _} = Error ->
            stop(),
            Error
    end.

-spec seed(shop_db:backend(), map()) -> ok | {error, term()}.
seed(Backend, Cfg) ->
    case shop_db:connect(Backend, shop_seed_conn) of
        {ok, Conn} ->
            try
                shop_seed:create(Conn, maps:with([users, products, orders], Cfg))
            after
                shop_db:disconnect(Conn)
            end;
        Error ->
            Error
    end.

%% Databases left by VMs that ended without shop:stop/0 (their OS process
%% is gone).
-spec remove_stale(file:filename()) -> ok.
remove_stale(Dir) ->
    [file:delete(F) || F <- filelib:wildcard(filename:join(Dir, "shop-*.db*")),
                       [_, OsPid | _] <- [string:split(filename:basename(F), "-", all)],
                       not filelib:is_dir("/proc/" ++ OsPid)],
    ok.

%% examples/shop/templates, found from where this module was compiled.
-spec templates_dir() -> file:filename().
templates_dir() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    filename:join(filename:dirname(filename:dirname(Src)), "templates").
