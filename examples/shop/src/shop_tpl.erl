%%% @doc The shop's templating tier: the pages as bbmustache templates
%%% (Debian's `erlang-bbmustache'), rendered in the request's process
%%% with the context {@link shop_view} makes of the rows.
%%%
%%% {@link load/2} parses every `*.mustache' file of the templates
%%% directory once (the partials `{{> header}}' and `{{> footer}}'
%%% included) and keeps them in `persistent_term'.
-module(shop_tpl).

%% PAGES (called by shop_http)
-export([index_page/0, user_page/2, report_page/2, catalog_page/1, not_found_page/1]).
%% SETUP
-export([load/2, unload/0, render/2]).

-define(KEY, {?MODULE, templates}).

%%%%%%%%%%%%%
%%% PAGES %%%
%%%%%%%%%%%%%

%% @doc The home page.
-spec index_page() -> binary().
index_page() ->
    render(index, #{<<"title">> => <<"kprof shop">>,
                    <<"catalog_size">> => shop:config(catalog_size)}).

%% @doc A user and their last orders.
-spec user_page(shop_db:row(), [shop_db:row()]) -> binary().
user_page(User, Orders) ->
    render(user, shop_view:user(User, Orders)).

%% @doc Sales per category, and the best customers.
-spec report_page([shop_db:row()], [shop_db:row()]) -> binary().
report_page(ByCategory, Best) ->
    render(report, shop_view:report(ByCategory, Best)).

%% @doc The catalog: products grouped by category.
-spec catalog_page([shop_db:row()]) -> binary().
catalog_page(Products) ->
    render(catalog, shop_view:catalog(Products)).

%% @doc The page of a path the shop does not know.
-spec not_found_page(iodata()) -> binary().
not_found_page(Path) ->
    render(not_found, #{<<"title">> => <<"Not found">>, <<"path">> => iolist_to_binary(Path)}).

%%%%%%%%%%%%%
%%% SETUP %%%
%%%%%%%%%%%%%

%% @doc Parse every template of `Dir'; `Backend' is named in the footer.
-spec load(file:filename(), binary()) -> ok | {error, term()}.
load(Dir, Backend) ->
    case filelib:wildcard(filename:join(Dir, "*.mustache")) of
        [] ->
            {error, {no_templates, Dir}};
        Files ->
            Templates = maps:from_list([{list_to_atom(filename:basename(F, ".mustache")),
                                         bbmustache:parse_file(F)} || F <- Files]),
            persistent_term:put(?KEY, {Templates, Backend}),
            ok
    end.

%% @doc Forget the templates.
-spec unload() -> ok.
unload() ->
    _ = persistent_term:erase(?KEY),
    ok.

%% @doc Render template `Name' with a context of binary keys.
-spec render(atom(), #{binary() => term()}) -> binary().
render(Name, Context) ->
    {Templates, Backend} = persistent_term:get(?KEY),
    bbmustache:compile(maps:get(Name, Templates), Context#{<<"backend">> => Backend},
                       [{key_type, binary}]).
