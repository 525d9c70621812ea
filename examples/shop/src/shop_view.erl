%%% @doc What each page shows, from database rows: prices formatted,
%%% products grouped by category, totals. The contexts {@link shop_tpl}
%%% renders; per-item work of the templating tier, kept out of
%%% `shop_tpl' so that tracing every function of `shop_tpl' stays cheap.
-module(shop_view).

-export([user/2, report/2, catalog/1, money/1]).

%% @doc A user and their last orders.
-spec user(shop_db:row(), [shop_db:row()]) -> map().
user(User, Orders) ->
    #{<<"title">> => maps:get(<<"name">>, User),
      <<"user">> => User,
      <<"has_orders">> => Orders =/= [],
      <<"orders">> => [O#{<<"total">> => money(maps:get(<<"total_cents">>, O))}
                       || O <- Orders]}.

%% @doc Sales per category, and the best customers.
-spec report([shop_db:row()], [shop_db:row()]) -> map().
report(ByCategory, Best) ->
    #{<<"title">> => <<"Sales report">>,
      <<"order_count">> => lists:sum([maps:get(<<"orders">>, R) || R <- ByCategory]),
      <<"revenue">> => money(lists:sum([maps:get(<<"revenue_cents">>, R) || R <- ByCategory])),
      <<"by_category">> => [R#{<<"revenue">> => money(maps:get(<<"revenue_cents">>, R))}
                            || R <- ByCategory],
      <<"best">> => [B#{<<"spent">> => money(maps:get(<<"spent_cents">>, B))} || B <- Best]}.

%% @doc Products grouped by category, each with its price and stock.
-spec catalog([shop_db:row()]) -> map().
catalog(Products) ->
    Categories = group(<<"category">>, [item(P) || P <- Products]),
    #{<<"title">> => <<"Catalog">>,
      <<"count">> => length(Products),
      <<"category_count">> => length(Categories),
      <<"categories">> => [#{<<"name">> => Name, <<"count">> => length(Items),
                             <<"items">> => Items}
                           || {Name, Items} <- Categories]}.

%% @doc Cents as euros: `<<"€12.05"/utf8>>'.
-spec money(integer()) -> binary().
money(Cents) ->
    unicode:characters_to_binary(io_lib:format("€~b.~2..0b", [Cents div 100, Cents rem 100])).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec item(shop_db:row()) -> shop_db:row().
item(#{<<"price_cents">> := Cents, <<"stock">> := Stock} = P) ->
    P#{<<"price">> => money(Cents), <<"in_stock">> => Stock > 0, <<"low">> => Stock < 5}.

%% Consecutive rows with the same value of `Key', in order.
-spec group(binary(), [map()]) -> [{term(), [map()]}].
group(Key, Rows) ->
    Groups = lists:foldl(fun(R, [{V, Acc} | Gs]) when map_get(Key, R) =:= V ->
                                 [{V, [R | Acc]} | Gs];
                            (R, Gs) ->
                                 [{maps:get(Key, R), [R]} | Gs]
                         end, [], Rows),
    lists:reverse([{V, lists:reverse(Items)} || {V, Items} <- Groups]).
