%%% @doc A flame capture recorded to a file: the Erlang side of
%%% `record => Path' (replayed by {@link kprof_flame_replay}).
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
%%% `record' records only. The protocol and the file format:
%%% doc/internals-record.md.
-module(kprof_flame_record).

%% Internal (kprof_flame_options, kprof_flame, kprof_flame_srv)
-export([to_check/1, check/2, sink_value/2, start_error/2, files/2]).

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
