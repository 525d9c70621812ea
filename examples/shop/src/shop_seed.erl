%%% @doc Seed data for the shop: users, products and orders, generated
%%% from a fixed random seed (the same database at every start) and
%%% written in one transaction.
-module(shop_seed).

-export([create/2]).

-export_type([sizes/0]).

-type sizes() :: #{users := pos_integer(), products := pos_integer(),
                   orders := pos_integer()}.

-define(CHUNK, 1000).
-define(CATEGORIES, [<<"books">>, <<"garden">>, <<"kitchen">>, <<"toys">>, <<"music">>,
                     <<"tools">>, <<"sports">>, <<"games">>, <<"office">>, <<"outdoor">>,
                     <<"lighting">>, <<"bath">>]).
-define(FIRST, [<<"Ada">>, <<"Alan">>, <<"Barbara">>, <<"Edsger">>, <<"Grace">>, <<"Joe">>,
                <<"Ken">>, <<"Leslie">>, <<"Margaret">>, <<"Robert">>, <<"Radia">>,
                <<"Tony">>, <<"Frances">>, <<"John">>, <<"Niklaus">>, <<"Donald">>]).
-define(LAST, [<<"Lovelace">>, <<"Turing">>, <<"Liskov">>, <<"Dijkstra">>, <<"Hopper">>,
               <<"Armstrong">>, <<"Thompson">>, <<"Lamport">>, <<"Hamilton">>,
               <<"Virding">>, <<"Perlman">>, <<"Hoare">>, <<"Allen">>, <<"Backus">>,
               <<"Wirth">>, <<"Knuth">>]).
-define(CITIES, [<<"Stockholm">>, <<"Lyon">>, <<"Porto">>, <<"Ghent">>, <<"Bergen">>,
                 <<"Krakow">>, <<"Turin">>, <<"Leeds">>]).
-define(ADJ, [<<"Sturdy">>, <<"Tiny">>, <<"Bright">>, <<"Quiet">>, <<"Swift">>, <<"Classic">>,
              <<"Folding">>, <<"Wooden">>, <<"Electric">>, <<"Vintage">>]).
-define(NOUN, [<<"Lamp">>, <<"Kettle">>, <<"Chair">>, <<"Puzzle">>, <<"Hammer">>,
               <<"Notebook">>, <<"Guitar">>, <<"Tent">>, <<"Ball">>, <<"Towel">>,
               <<"Rake">>, <<"Clock">>]).

%% @doc Create the tables on `Conn' (dropping old ones) and fill them.
-spec create(shop_db:conn(), sizes()) -> ok | {error, term()}.
create(Conn, #{users := NU, products := NP, orders := NO}) ->
    Saved = rand:export_seed(),
    _ = rand:seed(exsss, {20, 26, 11}),
    try
        Sql = [<<"BEGIN;">>, schema(),
               inserts(<<"users (id, name, email, city, joined)">>, NU, fun user/1),
               inserts(<<"products (id, name, category, price_cents, stock, description)">>,
                       NP, fun product/1),
               inserts(<<"orders (id, user_id, product_id, qty, day)">>, NO,
                       fun(Id) -> order(Id, NU, NP) end),
               <<"CREATE INDEX orders_user ON orders (user_id);"
                 "COMMIT;">>],
        shop_db:exec(Conn, iolist_to_binary(Sql))
    after
        restore_seed(Saved)
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec schema() -> binary().
schema() ->
    <<"DROP TABLE IF EXISTS orders; DROP TABLE IF EXISTS products; DROP TABLE IF EXISTS users;"
      "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL,"
      " city TEXT NOT NULL, joined INTEGER NOT NULL);"
      "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
      " category TEXT NOT NULL, price_cents INTEGER NOT NULL, stock INTEGER NOT NULL,"
      " description TEXT NOT NULL);"
      "CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL,"
      " product_id INTEGER NOT NULL, qty INTEGER NOT NULL, day INTEGER NOT NULL);">>.

%% INSERT statements of ?CHUNK rows each.
-spec inserts(binary(), pos_integer(), fun((pos_integer()) -> [iodata()])) -> iolist().
inserts(Table, N, RowFun) ->
    [[<<"INSERT INTO ">>, Table, <<" VALUES ">>,
      lists:join($,, [values(RowFun(Id)) || Id <- lists:seq(From, min(N, From + ?CHUNK - 1))]),
      $;]
     || From <- lists:seq(1, N, ?CHUNK)].

-spec values([iodata() | integer()]) -> iolist().
values(Fields) ->
    [$(, lists:join($,, [field(F) || F <- Fields]), $)].

-spec field(integer() | binary()) -> iodata().
field(I) when is_integer(I) -> integer_to_binary(I);
field(B) when is_binary(B) -> [$', binary:replace(B, <<"'">>, <<"''">>, [global]), $'].

-spec user(pos_integer()) -> [term()].
user(Id) ->
    First = pick(?FIRST),
    Last = pick(?LAST),
    [Id, <<First/binary, " ", Last/binary>>,
     iolist_to_binary([string:lowercase(First), $., integer_to_binary(Id), "@example.org"]),
     pick(?CITIES), rand:uniform(2000)].

-spec product(pos_integer()) -> [term()].
product(Id) ->
    Adj = pick(?ADJ),
    Noun = pick(?NOUN),
    Name = <<Adj/binary, " ", Noun/binary, " ", (integer_to_binary(Id))/binary>>,
    [Id, Name, pick(?CATEGORIES), 199 + rand:uniform(20000), rand:uniform(60) - 1,
     iolist_to_binary(["A ", string:lowercase(Adj), " ", string:lowercase(Noun),
                       " for every day: built to last, easy to clean, and ",
                       pick([<<"loved">>, <<"trusted">>, <<"chosen">>]), " by ",
                       integer_to_binary(rand:uniform(900)), " customers."])].

%% Orders: a few products sell much more than the rest.
-spec order(pos_integer(), pos_integer(), pos_integer()) -> [integer()].
order(Id, NU, NP) ->
    Product = case rand:uniform(4) of
                  1 -> rand:uniform(max(1, NP div 20));
                  _ -> rand:uniform(NP)
              end,
    [Id, rand:uniform(NU), Product, rand:uniform(5), rand:uniform(365) - 1].

-spec pick([binary()]) -> binary().
pick(List) ->
    lists:nth(rand:uniform(length(List)), List).

-spec restore_seed(term()) -> ok.
restore_seed(undefined) ->
    _ = erase(rand_seed),
    ok;
restore_seed(Seed) ->
    _ = rand:seed(Seed),
    ok.
