%%% @doc The tiers' validation and compilation, as functions of their
%%% arguments (they load the modules they name, nothing else): the tiers and
%%% the options of {@link kprof_tiers_cluster:start/2} ({@link check/2}), those of
%%% {@link kprof_tiers_cluster:report/1} ({@link check_report_opts/1}) and of
%%% {@link kprof_tiers:full_trace_flame/2} ({@link check_flame_opts/1}),
%%% and the match specs and sink commands a start sets (doc/internals-tiers.md).
%%%
%%% Every option check is here, one entry point per mode; nothing is set in
%%% the VM. A check fails by throwing `{kprof_tiers_plan, Reason}' inside
%%% this module, caught at the entry point into `{error, Reason}'.
-module(kprof_tiers_plan).

-include("kprof_tiers.hrl").

-export([check/2, check_report_opts/1, check_flame_opts/1]).
-export([full_selection/1, tier_ms/0, sink_opts/1, pattern_flags/1]).

-export_type([pattern/0, sink_spec/0]).

-define(MAX_TIERS, 32).
%% Never a tier or entry function: the request path's own.
-define(RESERVED_MODULES, [kprof, kprof_mark, kprof_tiers]).
-define(RESERVED_NAMES, [other, all]).
%% Options that are kprof_guard's limits.
-define(GUARD_KEYS, kprof_guard:limit_keys()).

-type tier_name() :: atom().
-type mfa_spec() :: kprof_tiers:mfa_spec().
-type opts() :: kprof_tiers:opts().
%% A function spec and the match spec set on it.
-type pattern() :: {mfa_spec(), [tuple()]}.
%% A function the sink is told about: its tier's index, or its role.
-type sink_spec() :: {module(), atom(), arity() | '_',
                      non_neg_integer() | start | stop | entry | traced}.

%% @doc Validate tiers and options on this node, loading the modules
%% named, and compile the trace patterns and sink commands. Nothing is
%% started.
-spec check(term(), term()) -> {ok, #plan{}} | {error, term()}.
check(Tiers, Opts) ->
    try
        O = check_opts(Opts),
        Checked = check_tiers(Tiers),
        Entries = check_entries(O),
        ok = load(kprof_mark, mark),
        Plan = plan(Checked, Entries, O),
        check_match_specs(Plan#plan.patterns),
        {ok, Plan}
    catch
        throw:{?MODULE, Reason} -> {error, Reason}
    end.

%% @doc The options of {@link kprof_tiers:full_trace_flame/2}: the flame
%% writers' output options only (`output_format', `output_directory',
%% `open'), checked by {@link kprof_flame_options:validate/2}; `{ok, Cfg}'.
-spec check_flame_opts(term()) -> {ok, map()} | {error, term()}.
check_flame_opts(Opts) when is_map(Opts) ->
    case unknown(Opts, [output_format, output_directory, open]) of
        [] -> kprof_flame_options:validate(Opts, apply);
        Unknown -> {error, {unknown_options, Unknown}}
    end;
check_flame_opts(Opts) ->
    {error, {bad_options, Opts}}.

%% The option errors of every mode: a key this mode does not know, or a
%% value a known key does not take; options that are not a map.
%%   {unknown_options, [Key]}   every unknown key, sorted
%%   {bad_option, Key, Value}   the first bad value, keys in order
%%   {bad_options, Opts}        not a map
-spec fail(term()) -> no_return().
fail(Reason) ->
    throw({?MODULE, Reason}).

%% The keys of Opts not in Known, sorted.
-spec unknown(map(), [atom()]) -> [term()].
unknown(Opts, Known) ->
    lists:sort([K || K <- maps:keys(Opts), not lists:member(K, Known)]).

%% The table (kprof_opts) checks every key and value; what a row cannot say
%% is checked here.
-spec check_opts(term()) -> opts().
check_opts(Opts) ->
    case kprof_opts:check(tiers, Opts) of
        {ok, _} -> ok;
        {error, Reason} -> fail(Reason)
    end,
    case maps:is_key(identity, Opts) andalso not maps:is_key(entry, Opts) of
        true -> fail({identity_without_entry, maps:get(identity, Opts)});
        false -> Opts
    end.

%% @doc Option `full_trace' as the sink takes it: `all', a list of
%% identities, or one identity; `false' is off. An empty or improper list
%% and `true' are mistakes (`error').
-spec full_selection(term()) -> false | all | [term()] | error.
full_selection(false) -> false;
full_selection(all) -> all;
full_selection(true) -> error;
full_selection([]) -> error;
full_selection(L) when is_list(L) ->
    try length(L) of
        _ -> lists:usort(L)
    catch
        error:badarg -> error
    end;
full_selection(Identity) -> [Identity].

%% @doc The options of {@link kprof_tiers_cluster:report/1}: `format', `time',
%% `nodes', `limit'.
-spec check_report_opts(term()) -> ok | {error, term()}.
check_report_opts(Opts) when is_map(Opts) ->
    Bad = [{K, V} || {K, V} <- lists:sort(maps:to_list(Opts)), not valid_report_opt(K, V)],
    case {unknown(Opts, [format, time, nodes, limit, sort, names]), Bad} of
        {[], []} -> ok;
        {[], [{K, V} | _]} -> {error, {bad_option, K, V}};
        {Unknown, _} -> {error, {unknown_options, Unknown}}
    end;
check_report_opts(Opts) ->
    {error, {bad_options, Opts}}.

-spec valid_report_opt(term(), term()) -> boolean().
valid_report_opt(format, F) -> lists:member(F, [text, string, term, json]);
valid_report_opt(names, N) -> N =:= erlang orelse N =:= elixir;
%% A column: requests, identity, wall, other or a tier's name, alone (its
%% mean) or with a statistic; whether the tier exists is known only once
%% the report is built (kprof_report:sort/2).
valid_report_opt(sort, {C, S}) -> is_atom(C) andalso kprof_report:is_stat(S);
valid_report_opt(sort, C) -> is_atom(C);
valid_report_opt(time, T) -> lists:member(T, [self, inclusive]);
valid_report_opt(nodes, [_ | _] = Ns) -> lists:all(fun is_atom/1, Ns);
valid_report_opt(limit, infinity) -> true;
valid_report_opt(limit, N) -> is_integer(N) andalso N > 0;
valid_report_opt(_, _) -> false.

%% [{Name, [{Spec, [MFA]}]}], every MFA in one tier only.
-spec check_tiers(term()) -> [{tier_name(), [{mfa_spec(), [mfa()]}]}].
check_tiers(Tiers) when not is_list(Tiers) ->
    fail({bad_tiers, Tiers});
check_tiers([]) ->
    fail(no_tiers);
check_tiers(Tiers) ->
    N = try length(Tiers) catch error:badarg -> fail({bad_tiers, Tiers}) end,
    N =< ?MAX_TIERS orelse fail({too_many_tiers, N, ?MAX_TIERS}),
    Checked = [check_tier(T) || T <- Tiers],
    Names = [Name || {Name, _} <- Checked],
    case Names -- lists:usort(Names) of
        [] -> ok;
        [Dup | _] -> fail({duplicate_tier, Dup})
    end,
    _ = lists:foldl(fun no_overlap/2, #{},
                    [{Name, Spec, MFA} || {Name, Specs} <- Checked,
                                          {Spec, MFAs} <- Specs, MFA <- MFAs]),
    Checked.

-spec check_tier(term()) -> {tier_name(), [{mfa_spec(), [mfa()]}]}.
check_tier({Name, Specs}) when is_atom(Name), is_list(Specs) ->
    lists:member(Name, ?RESERVED_NAMES) andalso fail({reserved_tier_name, Name}),
    Specs =:= [] andalso fail({empty_tier, Name}),
    {Name, [{Spec, expand(Name, Spec)} || Spec <- lists:usort(Specs)]};
check_tier(Tier) ->
    fail({bad_tier, Tier}).

-spec no_overlap({tier_name(), mfa_spec(), mfa()}, map()) -> map().
no_overlap({Name, Spec, MFA}, Seen) ->
    case Seen of
        #{MFA := {Name, _}} -> Seen;
        #{MFA := {Other, OtherSpec}} ->
            fail({overlapping_tiers, MFA, {Other, OtherSpec}, {Name, Spec}});
        _ -> Seen#{MFA => {Name, Spec}}
    end.

%% The functions a spec names; `Where' (a tier or `entry') names the
%% culprit.
-spec expand(atom(), term()) -> [mfa()].
expand(Where, {M, F, A} = Spec) when is_atom(M), M =/= '_', is_atom(F),
                                     (A =:= '_' orelse (is_integer(A) andalso A >= 0
                                                        andalso A =< 255)),
                                     (F =/= '_' orelse A =:= '_') ->
    lists:member(M, ?RESERVED_MODULES) andalso fail({reserved_module, Where, M}),
    ok = load(M, Where),
    Fns = M:module_info(functions),
    MFAs = case {F, A} of
               {'_', '_'} -> [{M, Fn, Ar} || {Fn, Ar} <- Fns];
               {_, '_'} -> [{M, F, Ar} || {Fn, Ar} <- Fns, Fn =:= F];
               _ -> [{M, F, A} || lists:member({F, A}, Fns)]
           end,
    MFAs =/= [] orelse fail({undefined_function, Where, Spec}),
    MFAs;
expand(Where, Spec) ->
    fail({bad_mfa_spec, Where, Spec}).

-spec load(module(), atom()) -> ok.
load(M, Where) ->
    case code:ensure_loaded(M) of
        {module, M} -> ok;
        {error, nofile} -> fail({unknown_module, Where, M});
        {error, Why} -> fail({module_not_loaded, Where, M, Why})
    end.

%% [{Spec, [MFA]}] of option `entry'.
-spec check_entries(opts()) -> [{mfa_spec(), [mfa()]}].
check_entries(#{entry := Entry}) ->
    Specs = case Entry of
                [_ | _] -> Entry;
                _ -> [Entry]
            end,
    [{Spec, expand(entry, Spec)} || Spec <- lists:usort(Specs)];
check_entries(_) ->
    [].

%%% Match specs (doc/internals-tiers.md)

%% @doc The match spec of a tier function: it fires only in a process that
%% carries a seq_trace token, and sends the token and the caller.
-spec tier_ms() -> [tuple()].
tier_ms() ->
    [{'_', [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}}}}]}].

%% @doc The flags of a pattern's trace_pattern/3 call: the request markers
%% are called remotely (kprof_tiers), so a global pattern sees them, and a
%% global pattern sends no return_to (two events fewer a request, which the
%% sink never needed); everything else local (a tier's return_to is its end).
-spec pattern_flags(mfa_spec()) -> [local | global].
pattern_flags({kprof_mark, _, _}) -> [global];
pattern_flags(_) -> [local].

-spec start_ms() -> [tuple()].
start_ms() ->
    [{['$1'], [{is_seq_trace}], [{message, {{{get_seq_token}, {caller}, '$1'}}}]}].

%% An entry call opens a request itself: no is_seq_trace guard.
-spec entry_ms(term(), list(), term()) -> tuple().
entry_ms(Head, Guards, none) ->
    {Head, Guards, [{set_seq_token, label, {self}},
                    {message, {{{get_seq_token}, {caller}}}}]};
entry_ms(Head, Guards, IdentityExpr) ->
    {Head, Guards, [{set_seq_token, label, {self}},
                    {message, {{{get_seq_token}, {caller}, IdentityExpr}}}]}.

-spec plan([{tier_name(), [{mfa_spec(), [mfa()]}]}], [{mfa_spec(), [mfa()]}], opts()) ->
          #plan{}.
plan(Checked, Entries, O) ->
    Indexed = lists:zip(lists:seq(0, length(Checked) - 1), Checked),
    TierPatterns = [{Spec, tier_ms()} || {_, {_, Specs}} <- Indexed, {Spec, _} <- Specs],
    %% The markers are traced global (pattern_flags/1): no return_to follows
    %% their calls, and the sink opens no frame for them (role mark: in no tier).
    Marks = [{{kprof_mark, start, 1}, start_ms()}, {{kprof_mark, stop, 0}, tier_ms()},
             {{kprof_mark, resume, 0}, tier_ms()}],
    SinkSpecs = [{M, F, A, I} || {I, {_, Specs}} <- Indexed, {{M, F, A}, _} <- Specs]
        ++ [{kprof_mark, start, 1, start}, {kprof_mark, stop, 0, stop},
            {kprof_mark, resume, 0, mark}]
        ++ [{M, F, A, entry} || {{M, F, A}, _} <- Entries],
    SlowMax = maps:get(slow_max, O, 20),
    #plan{tiers = [{Name, [Spec || {Spec, _} <- Specs]} || {Name, Specs} <- Checked],
          patterns = TierPatterns ++ Marks ++ entry_patterns(Entries, O),
          sink_specs = SinkSpecs,
          sink_opts = sink_opts(O),
          full = full_selection(maps:get(full_trace, O, false)),
          sample = maps:get(sample, O, 1.0),
          max_overhead = maps:get(max_overhead, O, undefined),
          window = maps:get(window, O, undefined),
          slow_max = SlowMax,
          limits = maps:with(?GUARD_KEYS, O),
          nodes = dedup(maps:get(nodes, O, [node()]))}.

%% Without duplicates, in the order given (nodes start in that order).
-spec dedup([node()]) -> [node()].
dedup(Nodes) ->
    lists:reverse(lists:foldl(fun(N, Acc) ->
                                      case lists:member(N, Acc) of
                                          true -> Acc;
                                          false -> [N | Acc]
                                      end
                              end, [], Nodes)).

%% @doc The options of the sink's `tiers_start' command: every user option
%% given that the sink takes, under the sink's key (the table's rows,
%% {@link kprof_opts:sent/1}: `full_trace_max_events' is `full_max_events'),
%% and the two the table cannot convert: `slow_ms' as `slow_us', and
%% `full_trace' as its selection (none when off).
-spec sink_opts(opts()) -> [{atom(), term()}].
sink_opts(O) ->
    Sent = [{SinkKey, V} || {K, SinkKey} <- kprof_opts:sent(tiers), K =/= full_trace,
                            {ok, V} <- [maps:find(K, O)]],
    Slow = [{slow_us, round(Ms * 1000)} || {ok, Ms} <- [maps:find(slow_ms, O)]],
    Full = case full_selection(maps:get(full_trace, O, false)) of
               false -> [];
               Sel -> [{full_trace, Sel}]
           end,
    Sent ++ Slow ++ Full.

-spec entry_patterns([{mfa_spec(), [mfa()]}], opts()) -> [pattern()].
entry_patterns([], _O) ->
    [];
entry_patterns(Entries, O) ->
    case maps:get(identity, O, mfa) of
        mfa ->
            [{Spec, [entry_ms('_', [], none)]} || {Spec, _} <- Entries];
        {arg, N} ->
            Var = list_to_atom("$" ++ integer_to_list(N)),
            [begin
                 N =< A orelse fail({bad_identity, {arg, N}, MFA}),
                 Head = [case I of N -> Var; _ -> '_' end || I <- lists:seq(1, A)],
                 {MFA, [entry_ms(Head, [], Var)]}
             end || MFA = {_, _, A} <- all_mfas(Entries)];
        Identity ->
            [{_, _, Arity} | _] = all_mfas(Entries),
            Clauses = identity_clauses(Identity, Arity),
            [{MFA, [entry_ms(H, G, E) || {H, G, E} <- fit_clauses(Clauses, MFA)]}
             || MFA <- all_mfas(Entries)]
    end.

-spec all_mfas([{mfa_spec(), [mfa()]}]) -> [mfa()].
all_mfas(Entries) ->
    lists:usort([MFA || {_, MFAs} <- Entries, MFA <- MFAs]).

%% The clauses of an identity fun or match spec, each with the match-spec
%% form of its last body expression.
-spec identity_clauses(term(), arity()) -> [{term(), list(), term()}].
identity_clauses({ms, MS}, _Arity) ->
    ms_clauses(MS, {ms, MS});
identity_clauses(Fun, Arity) when is_function(Fun, 1) ->
    case erl_eval:fun_data(Fun) of
        {fun_data, Imports, Clauses} ->
            case ms_transform:transform_from_shell(dbg, Clauses, Imports) of
                {error, [{_, [{_, _, Code} | _]} | _], _} ->
                    fail({identity_fun_not_convertible,
                          lists:flatten(ms_transform:format_error(Code))});
                MS when is_list(MS) ->
                    ms_clauses(MS, Fun);
                Other ->
                    fail({identity_fun_not_convertible, Other})
            end;
        false ->
            fail({identity_fun_not_convertible, literal_ms_hint(Arity)})
    end.

%% What to write instead of a compiled fun (an Elixir fn is one): the match
%% spec itself, for the entry's arity, in Erlang and in Elixir.
-spec literal_ms_hint(arity()) -> string().
literal_ms_hint(Arity) ->
    Head = ['$1' | lists:duplicate(max(Arity, 1) - 1, '_')],
    Ex = lists:join(", ", [":\"$1\"" | lists:duplicate(max(Arity, 1) - 1, ":_")]),
    lists:flatten(
      io_lib:format("only a fun typed in the Erlang shell can be converted (as dbg:fun2ms/1 "
                    "does), not a compiled one or an Elixir fn. Write the match spec itself: "
                    "the entry call's first argument is "
                    "identity => ~0p (the same as {arg, 1}); "
                    "in Elixir identity: {:ms, [{[~ts], [], [:\"$1\"]}]}. "
                    "A part of it: [{[{'_', '$2'}~ts], [], ['$2']}] takes the second "
                    "element of a first argument that is a pair; "
                    "a guard goes in the middle list, e.g. [{is_binary, '$1'}]",
                    [{ms, [{Head, [], ['$1']}]}, Ex,
                     lists:duplicate(max(Arity, 1) - 1, ", '_'")])).

-spec ms_clauses(term(), term()) -> [{term(), list(), term()}].
ms_clauses(MS, Culprit) when is_list(MS) ->
    [case Clause of
         {Head, Guards, [_ | _] = Body} when is_list(Guards) ->
             {Head, Guards, unwrap_message(lists:last(Body))};
         _ ->
             fail({bad_identity, Culprit})
     end || Clause <- MS];
ms_clauses(_, Culprit) ->
    fail({bad_identity, Culprit}).

%% `fun([A]) -> message(A) end' means the same as `fun([A]) -> A end'.
-spec unwrap_message(term()) -> term().
unwrap_message({message, Expr}) -> Expr;
unwrap_message(Expr) -> Expr.

%% A clause whose head is an argument list must have the entry's arity.
-spec fit_clauses([{term(), list(), term()}], mfa()) -> [{term(), list(), term()}].
fit_clauses(Clauses, {_, _, A} = MFA) ->
    Fit = [C || {H, _, _} = C <- Clauses, not is_list(H) orelse length(H) =:= A],
    Fit =/= [] orelse fail({bad_identity, {arity_mismatch, MFA}}),
    Fit.

-spec check_match_specs([pattern()]) -> ok.
check_match_specs(Patterns) ->
    lists:foreach(fun({Spec, MS}) ->
                          case erlang:match_spec_test([], MS, trace) of
                              {ok, _, _, _} -> ok;
                              {error, Errors} -> fail({bad_match_spec, Spec, Errors})
                          end
                  end, Patterns).
