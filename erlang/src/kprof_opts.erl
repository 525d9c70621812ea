%%% @doc The options of every mode and the flame output formats, from the one
%%% table include/ks_options.h (through the generated kprof_options.hrl).
%%%
%%% Pure: no process, no state. A row says which modes take the key, its
%%% type and bounds, its default and which side checks it: `erlang' and
%%% `both' rows are a user's options and are checked here; `sink' rows are
%%% what kprof sends the sink and only the sink checks them, so a user
%%% giving one gets `unknown_options' here.
%%%
%%% kprof_tiers_plan, kprof_flame_options, kprof_calls and kprof_guard check their options with
%%% {@link check/2}; what a table row cannot say (an identity needs an
%%% entry, say) stays in their own code. Errors are kprof's one shape:
%%% `{unknown_options, [Key]}' for keys the mode does not take (all of them,
%%% sorted), `{bad_option, Key, Value}' for the first bad value in key
%%% order, `{bad_options, Opts}' when the options are not a map.
%%%
%%% The guard's limits are options of the tiers, flame and calls modes too, but
%%% their defaults are filled in only for mode `guard': the other modes
%%% leave absent limits to kprof_guard, as they do today.
-module(kprof_opts).

-export([check/2, defaults/1, rows/1, forwarded/1, sink_rows/1, sent/1, formats/0, all_formats/0,
         extension/1, file_name/2, base_name/2, doc/1, doc_fields/1, values/1, replay/0,
         record_keys/0]).

-export_type([mode/0, row/0]).

-include("kprof_options.hrl").

-type mode() :: tiers | flame | sample | guard | calls.
-type bound() :: number() | infinity | neg_infinity.
-type row() :: {[mode()], atom(), int | num | numx | intinf | bool | term | enum, bound(), bound(),
                term(), erlang | sink | both, string()}.

%% @doc Checks a mode's options: every key must be a user option of the
%% mode (`erlang' or `both') and its value within the row's type and
%% bounds. Returns the options with the mode's defaults filled in.
-spec check(mode(), term()) ->
          {ok, map()} | {error, {unknown_options, [term()]} | {bad_option, term(), term()}
                              | {bad_options, term()}}.
check(Mode, Opts) when is_map(Opts) ->
    Rows = maps:from_list([{element(2, R), R} || R <- rows(Mode)]),
    case lists:sort([K || K <- maps:keys(Opts), not maps:is_key(K, Rows)]) of
        [_ | _] = Unknown ->
            {error, {unknown_options, Unknown}};
        [] ->
            case [KV || {K, V} = KV <- lists:sort(maps:to_list(Opts)),
                        not valid(maps:get(K, Rows), V)] of
                [] -> {ok, maps:merge(defaults(Mode), Opts)};
                [{K, V} | _] -> {error, {bad_option, K, V}}
            end
    end;
check(_Mode, Opts) ->
    {error, {bad_options, Opts}}.

%% @doc The defaults of a mode's user options (rows without one are off
%% unless given; see the module doc for the guard's limits).
-spec defaults(mode()) -> map().
defaults(Mode) ->
    maps:from_list([{K, D} || {Modes, K, _, _, _, D, _, _} <- rows(Mode), D =/= none,
                              Mode =:= guard orelse not lists:member(guard, Modes)]).

%% @doc The table's rows a user may give in a mode (checked by `erlang' or
%% `both'), in table order.
-spec rows(mode()) -> [row()].
rows(Mode) ->
    [R || {Modes, _, _, _, _, _, By, _} = R <- ?KPROF_OPTIONS, By =/= sink,
          lists:member(Mode, Modes)].

%% @doc The keys of a mode's user options that kprof hands the sink as they
%% are (`both' rows), in table order: the start command's option list is
%% built from these, so a new `both' row is sent without another edit.
-spec forwarded(mode()) -> [atom()].
forwarded(Mode) ->
    [K || {_, K, _, _, _, _, both, _} <- rows(Mode)].

%% @doc The rows the sink takes in a mode's start command (`both' and
%% `sink' rows), in table order: what doc/internals-tiers.md and doc/internals-flame.md list as
%% the command's keys.
-spec sink_rows(mode()) -> [row()].
sink_rows(Mode) ->
    [R || {Modes, _, _, _, _, _, By, _} = R <- ?KPROF_OPTIONS, By =/= erlang,
          lists:member(Mode, Modes)].

%% @doc The user options of a mode that kprof sends the sink, each with the
%% key the sink takes it under: `{K, K}' for a `both' row, `{K, SinkKey}'
%% for an `erlang' row that a `sink' row of the mode renames (that row's doc
%% is the user key: `full_max_events' is `full_trace_max_events'). In table
%% order. A sink row that is neither (`slow_us' is `slow_ms' in
%% microseconds, `hold' is kprof's own) is the sending code's to fill.
-spec sent(mode()) -> [{atom(), atom()}].
sent(Mode) ->
    Renamed = [{list_to_atom(Doc), K} || {_, K, _, _, _, _, sink, Doc} <- sink_rows(Mode)],
    [case By of
         both -> {K, K};
         erlang -> {K, proplists:get_value(K, Renamed)}
     end || {_, K, _, _, _, _, By, _} <- rows(Mode),
            By =:= both orelse lists:keymember(K, 1, Renamed)].

%% @doc The flame output formats, in the order of the sink's format bits.
-spec formats() -> [atom()].
formats() ->
    [F || {F, _, _, _} <- ?KPROF_FORMATS].

%% @doc The formats `output_format => all' writes (the rows whose last column
%% is 1): one file per kind of viewer; a format outside it is written only
%% when named.
-spec all_formats() -> [atom()].
all_formats() ->
    [F || {F, _, _, true} <- ?KPROF_FORMATS].

%% @doc A format's file extension (`".speedscope.json"', ...), or its
%% prefix when it ends in `.' (`"callgrind.out."').
-spec extension(atom()) -> string().
extension(Format) ->
    {Format, Ext, _, _} = lists:keyfind(Format, 1, ?KPROF_FORMATS),
    Ext.

%% @doc The name of a format's file for a base name, as the sink makes it:
%% `Base ++ Extension', or `Prefix ++ Base' (`callgrind.out.Base', the name
%% KCachegrind looks for).
-spec file_name(atom(), string()) -> string().
file_name(Format, Base) ->
    Ext = extension(Format),
    case lists:last(Ext) of
        $. -> Ext ++ Base;
        _ -> Base ++ Ext
    end.

%% @doc The base name of a format's file, the inverse of {@link
%% file_name/2}: `{ok, "x"}' for `"x.svg"' and `svg', for
%% `"callgrind.out.x"' and `callgrind'; `error' for a name that is not one.
-spec base_name(atom(), string()) -> {ok, string()} | error.
base_name(Format, Name) ->
    Ext = extension(Format),
    Affix = case lists:last(Ext) of
                $. -> string:prefix(Name, Ext);
                _ -> case lists:suffix(Ext, Name) of
                         true -> lists:sublist(Name, length(Name) - length(Ext));
                         false -> nomatch
                     end
            end,
    case Affix of
        nomatch -> error;
        "" -> error;
        Base -> {ok, Base}
    end.

%% @doc The atoms an enum option takes (`group', `names'), in the table's order.
-spec values(atom()) -> [atom()].
values(Key) ->
    {Key, Values} = lists:keyfind(Key, 1, ?KPROF_VALUES),
    Values.

%% @doc The options of {@link kprof:replay/2}, in the table's order: each key,
%% its flag on `kprof_sink --replay' (`""': none) and how the sink takes it:
%% `override' replaces the recorded value when given, `dir', `name' and
%% `formats' say where and as what the files are written, `erlang' is kprof's
%% alone (never sent).
-spec replay() -> [{atom(), string(), override | dir | name | formats | erlang}].
replay() ->
    ?KPROF_REPLAY.

%% @doc A recording header's keys: `{Id, Key}', the flame option `Key' under
%% the number `Id' in the file (doc/internals-record.md).
-spec record_keys() -> [{pos_integer(), atom()}].
record_keys() ->
    ?KPROF_RECORD_KEYS.

%% @doc One line of text per user option of a mode: key, default, bounds
%% and what it does, for docs and help texts.
-spec doc(mode()) -> [string()].
doc(Mode) ->
    [lists:flatten(io_lib:format("~ts (~ts~ts): ~ts", [K, default_text(D),
                                                        bounds_text(enum_key(T, K), Lo, Hi), Doc]))
     || {_, K, T, Lo, Hi, D, _, Doc} <- rows(Mode)].

%% @doc A row as the option tables of the docs show it (make option-docs,
%% scripts/option_docs.escript): its key, its default as Erlang text
%% (`none' when it has none), the values it takes, and what it does.
-spec doc_fields(row()) -> {atom(), string() | none, string(), string()}.
doc_fields({_, K, T, Lo, Hi, D, _, Doc}) ->
    Default = case D of
                  none -> none;
                  _ -> lists:flatten(io_lib:format("~0tp", [D]))
              end,
    {K, Default, lists:flatten(values_text(enum_key(T, K), Lo, Hi)), Doc}.

enum_key(enum, K) -> {enum, K};
enum_key(T, _) -> T.

values_text(int, Lo, Hi) -> ["integer", range_text(Lo, Hi)];
values_text(num, Lo, Hi) -> ["number", range_text(Lo, Hi)];
values_text(intinf, Lo, Hi) -> ["integer", range_text(Lo, Hi), " or infinity"];
values_text(numx, Lo, Hi) -> io_lib:format("number over ~ts up to ~ts", [bound_text(Lo), bound_text(Hi)]);
values_text(bool, _, _) -> "boolean";
values_text({enum, K}, _, _) -> lists:join(" | ", [atom_to_list(A) || A <- values(K)]);
values_text(term, _, _) -> "term".

range_text(neg_infinity, infinity) -> "";
range_text(Lo, infinity) -> io_lib:format(" >= ~ts", [bound_text(Lo)]);
range_text(Lo, Hi) -> io_lib:format(" ~ts..~ts", [bound_text(Lo), bound_text(Hi)]).

default_text(none) -> "no default";
default_text(D) -> io_lib:format("default ~0tp", [D]).

bounds_text(T, Lo, Hi) when T =:= int; T =:= num; T =:= intinf ->
    io_lib:format(", ~ts..~ts~ts", [bound_text(Lo), bound_text(Hi),
                                    case T of intinf -> " or infinity"; _ -> "" end]);
bounds_text(numx, Lo, Hi) -> io_lib:format(", over ~ts up to ~ts", [bound_text(Lo), bound_text(Hi)]);
bounds_text(bool, _, _) -> ", boolean";
bounds_text({enum, K}, _, _) -> [", ", values_text({enum, K}, 0, 0)];
bounds_text(term, _, _) -> "".

bound_text(infinity) -> "";
bound_text(B) -> io_lib:format("~0tp", [B]).

%%% Values

-spec valid(row(), term()) -> boolean().
valid({_, _, int, Lo, Hi, _, _, _}, V) -> is_integer(V) andalso within(V, Lo, Hi);
valid({_, _, num, Lo, Hi, _, _, _}, V) -> is_number(V) andalso within(V, Lo, Hi);
valid({_, _, numx, Lo, Hi, _, _, _}, V) -> is_number(V) andalso V > Lo andalso below(V, Hi);
valid({_, _, intinf, _, _, _, _, _}, infinity) -> true;
valid({_, _, intinf, Lo, Hi, _, _, _}, V) -> is_integer(V) andalso within(V, Lo, Hi);
valid({_, _, bool, _, _, _, _, _}, V) -> is_boolean(V);
valid({_, K, enum, _, _, _, _, _}, V) -> lists:member(V, values(K));
valid({_, K, term, _, _, _, _, _}, V) -> valid_term(K, V).

within(V, Lo, Hi) -> above(V, Lo) andalso below(V, Hi).
above(_, neg_infinity) -> true;
above(V, Lo) -> V >= Lo.
below(_, infinity) -> true;
below(V, Hi) -> V =< Hi.

%% The TERM rows: values no bounds describe, checked as the modes do today.
-spec valid_term(atom(), term()) -> boolean().
valid_term(entry, E) -> is_tuple(E) orelse (is_list(E) andalso E =/= []);
valid_term(identity, mfa) -> true;
valid_term(identity, {arg, N}) -> is_integer(N) andalso N >= 1 andalso N =< 255;
valid_term(identity, F) when is_function(F, 1) -> true;
valid_term(identity, {ms, [_ | _]}) -> true;
valid_term(identity, _) -> false;
valid_term(nodes, [_ | _] = Ns) -> lists:all(fun is_atom/1, Ns);
valid_term(nodes, _) -> false;
valid_term(full_trace, V) -> full_selection(V);
valid_term(output_format, all) -> true;
valid_term(output_format, F) when is_atom(F) -> lists:member(F, formats());
valid_term(output_format, [_ | _] = Fs) ->
    lists:all(fun(F) -> is_atom(F) andalso lists:member(F, formats()) end, Fs);
valid_term(output_format, _) -> false;
valid_term(output_directory, D) when is_list(D) -> D =/= [] andalso io_lib:printable_unicode_list(D);
valid_term(output_directory, D) when is_binary(D) ->
    byte_size(D) > 0 andalso is_list(unicode:characters_to_list(D));
valid_term(output_directory, _) -> false;
valid_term(name, N) ->
    is_list(N) andalso N =/= [] andalso io_lib:printable_unicode_list(N)
        andalso not lists:member($/, N);
valid_term(record, P) when is_list(P); is_binary(P) ->
    %% characters_to_list/1 raises on an improper list (["a" | b]).
    Chars = try unicode:characters_to_list(P) catch error:_ -> error end,
    is_list(Chars) andalso Chars =/= [] andalso not lists:member(0, Chars);
valid_term(record, _) -> false;
valid_term(raw_record, P) -> valid_term(record, P);
valid_term(pid, all) -> true;
valid_term(pid, P) when is_pid(P) -> true;
valid_term(pid, [_ | _] = Ps) -> lists:all(fun is_pid/1, Ps);
valid_term(pid, _) -> false;
valid_term(open, O) -> O =:= speedscope orelse O =:= browser orelse O =:= false;
valid_term(progress, P) -> is_boolean(P) orelse (is_integer(P) andalso P > 0);
valid_term(max_memory_bytes, V) -> V =:= default orelse V =:= infinity orelse (is_integer(V) andalso V > 0);
valid_term(rate, infinity) -> true;
valid_term(rate, {Max, PerMs}) -> is_integer(Max) andalso Max > 0 andalso is_integer(PerMs) andalso PerMs > 0;
valid_term(rate, _) -> false.

%% `false', `all', a proper non-empty list of identities or one identity;
%% `true' and `[]' are mistakes.
full_selection(true) -> false;
full_selection([]) -> false;
full_selection(L) when is_list(L) ->
    try length(L) of _ -> true catch error:badarg -> false end;
full_selection(_) -> true.
