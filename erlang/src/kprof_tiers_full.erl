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
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok after ?TIMEOUT -> ok end,
    case kprof_sink:command({tier_full_report, 0}) of
        #{on := true, identities := Aggs} ->
            Ids = [Id || {Id, _} <- Aggs],
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
    case filelib:ensure_path(Dir) of
        ok -> write_full(Ids, Dir, Formats, Cfg, []);
        {error, Reason} -> {error, {output_directory, Dir, Reason}}
    end.

-spec write_full([term()], file:filename(), [atom()], map(), list()) ->
          {ok, [{term(), [file:filename()]}]} | {error, term()}.
write_full([], _Dir, _Formats, _Cfg, Acc) ->
    {ok, lists:reverse(Acc)};
write_full([Id | Rest], Dir, Formats, Cfg, Acc) ->
    Cmd = {tier_full_write, Id, unicode:characters_to_binary(Dir),
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

%% kprof-full-<identity as safe text>-<local time>
-spec full_base_name(term()) -> string().
full_base_name(Id) ->
    Text = unicode:characters_to_list(io_lib:format("~0tp", [Id])),
    Safe = string:slice([case (C >= $a andalso C =< $z) orelse (C >= $A andalso C =< $Z)
                                 orelse (C >= $0 andalso C =< $9) orelse C =:= $_ of
                             true -> C;
                             false -> $_
                         end || C <- Text], 0, 60),
    {{Y, Mo, D}, {H, Mi, S}} = calendar:local_time(),
    lists:flatten(io_lib:format("kprof-full-~ts-~4..0b~2..0b~2..0b-~2..0b~2..0b~2..0b",
                                [Safe, Y, Mo, D, H, Mi, S])).
