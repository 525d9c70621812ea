%%% @doc The function of a flame_apply capture run in the calling process,
%%% with the capture's trace flags (as {@link kprof_flame_srv:open/3} gave
%%% them) set on it for the call, in the capture's trace session, and taken
%%% off after ({@link kprof_flame_trace}). Its frame is hidden
%%% (the sink's `hide' option, {@link hidden_frame/0}), so the capture's
%%% stacks start at the function.
%%%
%%% Below both {@link kprof_flame} (flame_apply) and {@link
%%% kprof_flame_calib} (whose measuring rounds are captures of their own).
-module(kprof_flame_run).

-export([traced/2, hidden_frame/0]).

%% @doc Runs `Fun()' (or `apply(M, F, Args)') traced with `Flags':
%% `{{ok, Result} | {raise, Class, Reason, Stack}, End}', `End' the
%% monotonic time (ns) of the return.
-spec traced(fun(() -> term()) | {module(), atom(), [term()]}, list()) ->
          {{ok, term()} | {raise, atom(), term(), list()}, integer()}.
traced(What, Flags) ->
    _ = kprof_flame_trace:set_flags(self(), Flags),
    try case What of
            {M, F, Args} -> erlang:apply(M, F, Args);
            Fun -> Fun()
        end
    of
        Result ->
            End = erlang:monotonic_time(nanosecond),
            kprof_flame_trace:clear_flags(self(), Flags),
            {{ok, Result}, End}
    catch
        Class:Reason:Stack ->
            End = erlang:monotonic_time(nanosecond),
            kprof_flame_trace:clear_flags(self(), Flags),
            {{raise, Class, Reason, Stack}, End}
    end.

%% @doc The frame a flame_apply capture hides: {@link traced/2}'s. The
%% capture's options name it (`hide') when it opens.
-spec hidden_frame() -> mfa().
hidden_frame() ->
    {?MODULE, traced, 2}.

