%%% @doc Rows of a query as maps, for the templates; placeholders for
%%% PostgreSQL. Per-row work of {@link shop_db}, kept out of it so that
%%% tracing every function of `shop_db' stays cheap.
-module(shop_rows).

-export([to_maps/2, from_pgsql/2, numbered/1]).

%% @doc Rows (tuples, or lists) as maps from column name (a binary) to
%% value.
-spec to_maps([string() | binary()], [tuple() | list()]) -> [shop_db:row()].
to_maps(Cols, Rows) ->
    Names = [iolist_to_binary(C) || C <- Cols],
    [maps:from_list(lists:zip(Names, values(R))) || R <- Rows].

%% @doc Rows as `pgsql:pquery/3' gives them (`[{Type, Text}]' each) as
%% maps, values decoded: integers, floats, text as binaries.
-spec from_pgsql([{string(), atom()}], [[{atom(), binary() | null}]]) -> [shop_db:row()].
from_pgsql(Cols, Rows) ->
    to_maps([Name || {Name, _Type} <- Cols], [[pg_value(V) || V <- R] || R <- Rows]).

%% @doc `?' placeholders numbered: `"a = ? AND b = ?"' becomes
%% `"a = $1 AND b = $2"'.
-spec numbered(binary()) -> binary().
numbered(Sql) ->
    [First | Rest] = binary:split(Sql, <<"?">>, [global]),
    Numbered = [[$$, integer_to_binary(N), Part]
                || {N, Part} <- lists:zip(lists:seq(1, length(Rest)), Rest)],
    iolist_to_binary([First | Numbered]).

-spec values(tuple() | list()) -> list().
values(T) when is_tuple(T) -> tuple_to_list(T);
values(L) when is_list(L) -> L.

-spec pg_value({atom(), binary() | null}) -> term().
pg_value({_, null}) -> null;
pg_value({Type, Text}) when Type =:= int2; Type =:= int4; Type =:= int8 ->
    binary_to_integer(Text);
pg_value({Type, Text}) when Type =:= float4; Type =:= float8; Type =:= numeric ->
    case binary:match(Text, <<".">>) of
        nomatch -> binary_to_integer(Text);
        _ -> binary_to_float(Text)
    end;
pg_value({_, Text}) ->
    Text.
