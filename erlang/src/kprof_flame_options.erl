%%% @doc A flame capture's options checked, for every mode (`apply', `pid',
%%% `capture'): the flame rows of the option table (include/ks_options.h,
%%% through {@link kprof_opts}), the recording's own rules
%%% ({@link kprof_flame_record}), the mode's default of `children', and the
%%% guard's limits, set apart under `limits'. The list of options is
%%% {@link kprof_flame}'s module doc.
%%%
%%% Below both the captures ({@link kprof_flame}) and the calibration
%%% ({@link kprof_flame_calib}), which runs captures of its own; the web
%%% trigger and the tiers' full trace check a capture's options here too.
-module(kprof_flame_options).

-export([validate/2]).

-define(GUARD_KEYS, kprof_guard:limit_keys()).

%% @doc Check options (a map) for a mode; the result has every default filled in.
%% `{error, {unknown_options, [Key]}}' names every key it does not know,
%% `{error, {bad_option, Key, Value}}' the first bad value.
-spec validate(term(), apply | pid | capture) -> {ok, map()} | {error, term()}.
validate(Opts, Mode) ->
    %% Keys, values and defaults: the option table's (kprof_opts).
    case kprof_opts:check(flame, kprof_flame_record:to_check(Opts)) of
        {ok, Checked} ->
            Cfg0 = maps:without(?GUARD_KEYS, Checked#{children => children(Mode, Opts, Checked)}),
            Cfg = kprof_flame_record:check(Cfg0, Opts),
            case maps:with(?GUARD_KEYS, Opts) of
                Limits when map_size(Limits) =:= 0 -> {ok, Cfg#{limits => #{}}};
                Limits ->
                    %% The guard's limits over its defaults, as the guard merges them.
                    {ok, Merged} = kprof_guard:validate_limits(Limits),
                    {ok, Cfg#{limits => Merged}}
            end;
        {error, _} = Error ->
            Error
    end.

%% flame_apply follows the processes its call spawns unless told not to, as
%% eprof, fprof and tprof do: a call's work is also what it hands to the
%% processes it starts (compile:file compiles in one), and leaving them out
%% would show the caller waiting with nothing to say why (doc/flame.md,
%% "What a call spawns"). flame_pid and flame_capture keep the table's
%% default (false).
-spec children(apply | pid | capture, map(), map()) -> boolean().
children(apply, Opts, _Checked) when not is_map_key(children, Opts) -> true;
children(_Mode, _Opts, #{children := Children}) -> Children.
