%%% @doc A flame capture recorded to a file, and the file replayed: the
%%% Erlang side of `record => Path' and of {@link kprof:replay/2}.
%%%
%%% With `record => Path' the sink also writes the capture's raw event stream
%%% (the events, the names they refer to, the processes' membership; zstd) to
%%% `Path', made absolute here. The sink opens it at the start (a new file,
%%% mode 0600, in a safe directory): when it cannot, the capture does not start
%%% and answers `{error, {record_failed, Path, Reason}}'. The file is bounded by
%%% `max_record_bytes' (1 GiB); past it the recording stops, or with
%%% `record_rotate => N' goes on in a new file keeping N old ones (`Path.1' ..
%%% `Path.N'); what was cut is counted and printed. A write that fails (a full
%%% disk) stops the recording and removes its files; the capture's other files
%%% are written as usual, and the failure is printed. The capture returns its
%%% files with the recording's files after them; `output_format => []' with
%%% `record' records only.
%%%
%%% A replay rebuilds the capture from the file(s) in the sink, with no VM
%%% state of the capture: it runs on any node with kprof, where the traced
%%% modules need not exist (or from the shell, `kprof_sink --replay FILE',
%%% no VM at all). The protocol and the file format: doc/protocol.md,
%%% "Recording".
-module(kprof_flame_record).

%% Internal (kprof_flame, kprof_flame_srv)
-export([to_check/1, check/2, sink_value/2, start_error/2, files/2]).
%% PUBLIC (through kprof)
-export([replay/2]).

%% The options kprof:replay/2 takes: what shapes the outputs.
-define(REPLAY_KEYS, [output_format, output_directory, name, group, fold_recursion, names,
                      top, max_bytes, info]).
%% Keys sent to the sink only when given: the recorded value otherwise.
-define(OVERRIDES, [group, fold_recursion, names, top, max_bytes]).
%% How long a replay may take in the sink: about 5 s a GiB of file.
-define(REPLAY_TIMEOUT, 120000).

%% @doc The options the flame table checks: `output_format => []' (record
%% only) is taken out when `record' is there, and put back by {@link check/2};
%% without `record' the table refuses it (`{bad_option, output_format, []}').
-spec to_check(term()) -> term().
to_check(#{output_format := [], record := _} = Opts) -> maps:remove(output_format, Opts);
to_check(Opts) -> Opts.

%% @doc A flame capture's checked options `Cfg' (of `Opts'), `record' made
%% absolute, `output_format => []' back.
-spec check(map(), map()) -> map().
check(#{record := Path} = Cfg, Opts) ->
    Formats = case Opts of
                  #{output_format := []} -> [];
                  _ -> maps:get(output_format, Cfg)
              end,
    Cfg#{record => filename:absname(Path), output_format => Formats};
check(Cfg, _Opts) ->
    Cfg.

%% @doc An option's value as flame_start sends it (a path as a binary).
-spec sink_value(atom(), term()) -> term().
sink_value(record, Path) -> unicode:characters_to_binary(Path);
sink_value(_Key, Value) -> Value.

%% @doc flame_start's refusal of the record file, its path in the form the
%% caller gave `record' (a string or a binary); other errors as they are.
-spec start_error(term(), map()) -> term().
start_error({error, {record_failed, Path, Why}}, #{record := Given}) when is_list(Given) ->
    {error, {record_failed, unicode:characters_to_list(Path), Why}};
start_error(Error, _Cfg) ->
    Error.

%% @doc The recording's files in a flame_write answer, in the form the
%% caller gave `record' (a string or a binary), oldest first; what was cut
%% or failed is printed to the caller's group leader.
-spec files(map(), map()) -> [file:filename_all()].
files(#{record := #{files := Files} = Rec}, Cfg) ->
    say(Rec),
    case is_binary(maps:get(record, Cfg, <<>>)) of
        true -> Files;
        false -> [unicode:characters_to_list(F) || F <- Files]
    end;
files(_Info, _Cfg) ->
    [].

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

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec say(map()) -> ok.
say(#{error := Error, path := Path}) when Error =/= none ->
    io:format("kprof record: writing ~ts failed (~p): the recording stopped and its files "
              "were removed; the capture's other files are whole~n", [Path, Error]);
say(#{cut_events := Cut, path := Path}) when Cut > 0 ->
    io:format("kprof record: ~b events are not in ~ts (past max_record_bytes, or in the "
              "rotated files removed; a larger bound or record_rotate keeps more)~n",
              [Cut, Path]);
say(_Rec) ->
    ok.

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
        {ok, _} -> [abs_bin(P)];
        {error, _} -> error
    end.

-spec abs_bin(file:filename_all()) -> binary().
abs_bin(P) ->
    unicode:characters_to_binary(filename:absname(P)).

%% The flame table's checks on replay's keys (output_format [] is refused:
%% a replay writes outputs).
-spec check_replay(map()) -> {ok, map()} | {error, term()}.
check_replay(Opts) ->
    case lists:sort([K || K <- maps:keys(Opts), not lists:member(K, ?REPLAY_KEYS)]) of
        [_ | _] = Unknown ->
            {error, {unknown_options, Unknown}};
        [] ->
            case kprof_opts:check(flame, Opts) of
                {ok, Checked} -> {ok, maps:with(?REPLAY_KEYS, Checked)};
                Error -> Error
            end
    end.

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
            | Base] ++ [{K, V} || {K, V} <- maps:to_list(maps:with(?OVERRIDES, Given))],
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
