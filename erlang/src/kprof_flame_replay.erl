%%% @doc A flame capture's recording replayed ({@link kprof:replay/2}): the
%%% sink rebuilds the capture from the file(s) (written with `record =>
%%% Path', {@link kprof_flame_record}), with no VM state of the capture, and
%%% writes its outputs as the live capture would have with the same options.
%%% It runs on any node with kprof, where the traced modules need not exist
%%% (or from the shell, `kprof_sink --replay FILE', no VM at all). The
%%% protocol and the file format: doc/internals-record.md.
-module(kprof_flame_replay).

%% PUBLIC (through kprof)
-export([replay/2, recorded_options/1]).

%% The options kprof:replay/2 takes (what shapes the outputs) and those sent
%% to the sink only when given (the recorded value otherwise) are the table's
%% KS_REPLAY lines: kprof_opts:replay/0.
%% How long a replay may take in the sink: about 5 s a GiB of file.
-define(REPLAY_TIMEOUT, 120000).

%% @doc Replay recorded file(s) (a path, or the segments of a rotated
%% recording, oldest first) into the files of a fresh capture.
-spec replay(file:filename_all() | [file:filename_all()], map()) ->
          kprof_flame:written() | {error, term()}.
replay(Paths0, Opts) when is_map(Opts) ->
    case {paths(Paths0), check_replay(Opts)} of
        {error, _} -> {error, {badarg, Paths0}};
        {_, {error, _} = Error} -> Error;
        {Paths, {ok, Cfg}} ->
            case kprof_app:ensure_started() of
                ok -> with_out_dir(Cfg, fun() -> run_replay(Paths, Cfg, Opts) end);
                Error -> Error
            end
    end;
replay(_Paths, Opts) ->
    {error, {bad_options, Opts}}.

%% @doc The options a recording was made with (its header: the capture's
%% options that shape a replay), read by the sink without replaying it.
-spec recorded_options(file:filename_all()) -> {ok, map()} | {error, term()}.
recorded_options(Path) ->
    case one(Path) of
        error ->
            {error, {badarg, Path}};
        [Bin] ->
            case kprof_app:ensure_started() of
                ok -> kprof_sink:command({record_header, Bin});
                Error -> Error
            end
    end.

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec paths(term()) -> [binary()] | error.
paths(P) when is_binary(P) ->
    one(P);
paths([C | _] = P) when is_integer(C) ->
    one(P);
paths([_ | _] = Ps) ->
    Each = try [one(P) || P <- Ps] catch error:_ -> [error] end,  % an improper list
    case lists:member(error, Each) of
        true -> error;
        false -> lists:append(Each)
    end;
paths(_) ->
    error.

%% One path: a non-empty string or binary, as the table checks `record'.
-spec one(term()) -> [binary()] | error.
one(P) ->
    case kprof_opts:check(flame, #{record => P}) of
        {ok, _} -> abs_bin(P);
        {error, _} -> error
    end.

%% (A chardata list the table lets through but no file name is, such as
%% ["a" | b], is an error here, not an exception.)
-spec abs_bin(file:filename_all()) -> [binary()] | error.
abs_bin(P) ->
    try unicode:characters_to_binary(filename:absname(P)) of
        Bin when is_binary(Bin) -> [Bin];
        _ -> error
    catch
        error:_ -> error
    end.

%% The flame table's checks on replay's keys (output_format [] is refused:
%% a replay writes outputs).
-spec check_replay(map()) -> {ok, map()} | {error, term()}.
check_replay(Opts) ->
    Keys = [K || {K, _, _} <- kprof_opts:replay()],
    case lists:sort([K || K <- maps:keys(Opts), not lists:member(K, Keys)]) of
        [_ | _] = Unknown ->
            {error, {unknown_options, Unknown}};
        [] ->
            case kprof_opts:check(flame, Opts) of
                {ok, Checked} -> {ok, maps:with(Keys, Checked)};
                Error -> Error
            end
    end.

-spec overrides() -> [atom()].
overrides() ->
    [K || {K, _, override} <- kprof_opts:replay()].

-spec with_out_dir(map(), fun(() -> Result)) -> Result | {error, term()}.
with_out_dir(Cfg, Fun) ->
    case kprof_flame:out_dir(Cfg) of
        ok -> Fun();
        Error -> Error
    end.

-spec run_replay([binary()], map(), map()) -> kprof_flame:written() | {error, term()}.
run_replay(Paths, Cfg, Given) ->
    Dir = filename:absname(maps:get(output_directory, Cfg)),
    Base = case maps:find(name, Cfg) of
               {ok, N} -> [{name, unicode:characters_to_binary(N)}];
               error -> []
           end,
    Opts = [{output_directory, unicode:characters_to_binary(Dir)},
            {output_format, kprof_flame:formats(maps:get(output_format, Cfg))}
            | Base] ++ [{K, V} || {K, V} <- maps:to_list(maps:with(overrides(), Given))],
    Arg = case Paths of [One] -> One; _ -> Paths end,
    case kprof_sink:command({flame_replay, Arg, Opts}, ?REPLAY_TIMEOUT) of
        {ok, Out, Info} ->
            Files = kprof_flame:paths(Out, Cfg),
            case maps:get(replay, Info, #{}) of
                #{truncated := true, error := Why} ->
                    io:format("kprof replay: the recording ends early (~p): the files show "
                              "the ~b events read before~n",
                              [Why, maps:get(events, maps:get(replay, Info))]),
                    _ = kprof_flame:result(Files, Info, Cfg),
                    {error, {truncated, Why, Files}};
                _ ->
                    kprof_flame:result(Files, Info, Cfg)
            end;
        {error, no_events, _Info} ->
            {error, no_events};
        {error, timeout} ->
            _ = kprof_sink:restart({flame_replay_timeout, ?REPLAY_TIMEOUT}),
            {error, {sink, {no_answer_ms, ?REPLAY_TIMEOUT}}};
        {error, _} = Error ->
            Error;
        Other ->
            {error, {sink, Other}}
    end.
