%%% @doc How kprof's text names a function: Erlang's `lists:seq/2', or,
%%% with the option `names => elixir', Elixir's `Enum.sum/1' and
%%% `:lists.seq/2' (a module `Elixir.Enum' is `Enum', any other module is
%%% its atom, `:lists'; a name that is not an identifier is quoted, as
%%% Elixir prints it: `Enum."-map/2-fun-0-"/3'). The flame files' frames
%%% are named the same way by the sink (port/callpath/names.c).
%%% ```
%%% 1> kprof_names:mfa({'Elixir.Enum', sum, 1}, elixir).
%%% "Enum.sum/1"
%%% 2> kprof_names:mfa({lists, seq, 2}, elixir).
%%% ":lists.seq/2"
%%% 3> kprof_names:mfa({lists, seq, 2}, erlang).
%%% "lists:seq/2"
%%% '''
-module(kprof_names).

-export([mfa/2]).

-export_type([style/0]).

-type style() :: erlang | elixir.

%% @doc `{M, F, Arity}' as text in the style; anything else as `~0tp'. A
%% sampled profile's native frame, `{'[C]', Symbol, 0}' (and `'[JIT]'',
%% `'[unknown]'', `'[scheduler]'', ...), is `[C]Symbol' in either style, as
%% the sink names it in the files (port/callpath/names.c).
-spec mfa(term(), style()) -> string().
mfa({M, F, 0}, _Style) when is_atom(M), is_atom(F) ->
    case atom_to_list(M) of
        [$[ | _] = Native -> lists:flatten([Native | atom_to_list(F)]);
        _ -> plain({M, F, 0}, _Style)
    end;
mfa(MFA, Style) ->
    plain(MFA, Style).

-spec plain(term(), style()) -> string().
plain({M, F, A}, erlang) when is_atom(M), is_atom(F), is_integer(A) ->
    lists:flatten(io_lib:format("~ts:~ts/~b", [M, F, A]));
plain({M, F, A}, elixir) when is_atom(M), is_atom(F), is_integer(A) ->
    lists:flatten([module(atom_to_list(M)), $., function(atom_to_list(F)), $/,
                   integer_to_list(A)]);
plain(Other, _Style) ->
    lists:flatten(io_lib:format("~0tp", [Other])).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec module(string()) -> string().
module("Elixir." ++ Alias) when Alias =/= [] -> Alias;
module(M) ->
    case identifier(M) of
        true -> [$: | M];
        false -> [$:, quoted(M)]
    end.

-spec function(string()) -> string().
function(F) ->
    case identifier(F) of
        true -> F;
        false -> quoted(F)
    end.

%% A name Elixir writes bare: lower case or _ first, then letters, digits,
%% _ and @, maybe ending in ? or !.
-spec identifier(string()) -> boolean().
identifier(S) ->
    re:run(S, "^[a-z_][a-zA-Z0-9_@]*[?!]?$", [unicode, {capture, none}]) =:= match.

-spec quoted(string()) -> string().
quoted(S) ->
    [$" | lists:flatten([case C of
                             $" -> "\\\"";
                             $\\ -> "\\\\";
                             _ -> C
                         end || C <- S])] ++ [$"].
