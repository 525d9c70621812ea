%%% @doc Full trace's flame graphs: writes the sink's full-trace aggregates
%%% of each identity (or of one) as files, with the writers of the flame
%%% captures (behind {@link kprof_tiers:full_trace_flame/2}). The
%%% aggregates stay in the sink.
-module(kprof_tiers_full).

-export([flame/2]).

-define(TIMEOUT, 30000).
%% Writing a big graph takes the sink a while.
-define(WRITE_TIMEOUT, 300000).

%% @doc Write a flame graph of each full-traced identity (`all') or of one,
%% from this node's sink: `{ok, [{Identity, Files}]}'. The options are
%% checked by {@link kprof_tiers_plan:check_flame_opts/1}.
-spec flame(term(), term()) -> {ok, [{term(), [file:filename()]}]} | {error, term()}.
flame(Which, Opts) ->
    case kprof_tiers_plan:check_flame_opts(Opts) of
        {ok, Cfg} -> full_flame(Which, Cfg);
        {error, _} = Error -> Error
    end.

full_flame(Which, Cfg) ->
    %% Every trace message sent so far is in the port's queue before the command.
    _ = kprof_trace_session:delivered("tiers_flame", ?TIMEOUT),
    case kprof_sink:command({tiers_full_report, 0}) of
        #{on := true, identities := Aggs} ->
            Ids = [Id || #{identity := Id} <- Aggs],
            case Which of
                all -> write_full(Ids, Cfg);
                _ ->
                    case lists:member(Which, Ids) of
                        true -> write_full([Which], Cfg);
                        false -> {error, {no_full_trace, Which}}
                    end
            end;
        #{on := false} ->
            {error, full_trace_off};
        {error, not_started} ->
            {error, not_started};
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.

-spec write_full([term()], map()) -> {ok, [{term(), [file:filename()]}]} | {error, term()}.
write_full(Ids, Cfg) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    Formats = kprof_flame:formats(maps:get(output_format, Cfg)),
    case kprof_flame:out_dir(Cfg) of
        ok -> write_full(Ids, Dir, Formats, Cfg, []);
        {error, _} = Error -> Error
    end.

-spec write_full([term()], file:filename(), [atom()], map(), list()) ->
          {ok, [{term(), [file:filename()]}]} | {error, term()}.
write_full([], _Dir, _Formats, _Cfg, Acc) ->
    {ok, lists:reverse(Acc)};
write_full([Id | Rest], Dir, Formats, Cfg, Acc) ->
    Cmd = {tiers_full_write, Id, unicode:characters_to_binary(Dir),
           unicode:characters_to_binary(full_base_name(Id)), Formats},
    case kprof_sink:command(Cmd, ?WRITE_TIMEOUT) of
        {ok, Paths, _Info} ->
            Files = kprof_flame:paths(Paths, Cfg),
            kprof_flame:maybe_open(maps:get(open, Cfg), Files),
            write_full(Rest, Dir, Formats, Cfg, [{Id, Files} | Acc]);
        {error, no_events} ->
            write_full(Rest, Dir, Formats, Cfg, [{Id, []} | Acc]);
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.

%% kprof-full-<hash>-<local time>: the identity may hold what a report should
%% not show in a file name (a token, a user's name); its hash names it: 12 hex
%% digits of an MD5 of the identity salted once per node start, so one identity
%% keeps its name while the node runs and a short secret cannot be guessed back
%% from it. full_trace_flame/2 returns which files are whose.
-spec full_base_name(term()) -> string().
full_base_name(Id) ->
    <<Hash:48, _/bits>> = erlang:md5([salt(), term_to_binary(Id)]),
    {{Y, Mo, D}, {H, Mi, S}} = calendar:local_time(),
    lists:flatten(io_lib:format("kprof-full-~12.16.0b-~4..0b~2..0b~2..0b-~2..0b~2..0b~2..0b",
                                [Hash, Y, Mo, D, H, Mi, S])).

-spec salt() -> binary().
salt() ->
    case persistent_term:get({?MODULE, salt}, undefined) of
        undefined ->
            Salt = erlang:md5(term_to_binary({node(), os:getpid(), erlang:system_time(),
                                              erlang:unique_integer(), make_ref(),
                                              rand:uniform(1 bsl 60)})),
            persistent_term:put({?MODULE, salt}, Salt),
            Salt;
        Salt ->
            Salt
    end.
