%%% @doc The functions with the most self time in a flame capture, as
%%% tprof and eprof print them after a run: `top => N' in the options of
%%% `kprof:flame_apply/2', `kprof:flame_capture/3' or `kprof:flame_pid/3'.
%%%
%%% The sink counts every call of the capture and adds up, per function,
%%% its self time (the time it was the top of a stack, not waiting and not
%%% collecting garbage) and its inclusive time (from its call to its
%%% return, waits and callees included; a recursive function's inner calls
%%% are not counted again). The capture then returns the table as terms,
%%% and prints it to the caller's group leader:
%%% ```
%%% 1> kprof:flame_apply(fun() -> lists:sum([X * X || X <- lists:seq(1, 100000)]) end,
%%%                      #{top => 3, output_format => folded, output_directory => "/tmp/fl"}).
%%% kprof flame: 3 of 40 functions, most self time first (18875.713 ms in all)
%%%       calls    self ms  self %    incl ms  function
%%%      300009   2537.327    13.4  18409.595  erl_eval:expr/6
%%%      200006   1574.951     8.3   3680.228  lists:foldl/3
%%%      100001   1277.701     6.8  18292.142  erl_eval:eval_generate/8
%%% kprof flame: times corrected for tracing's cost: 442 ns off for each of 5929889 events on average (a call or other event 504 ns, a return_to 338 ns, from the capture's own intervals; 2623.458 ms in all); 0 call paths had less time than their events' cost and count as 0 (0.000 ms not taken off)
%%% {ok,333338333350000,
%%%     ["/tmp/fl/kprof-apply-20261126-222758-66.folded"],
%%%     [#{calls => 300009,inclusive_us => 18409595,mfa => {erl_eval,expr,...},...},
%%%      #{calls => 200006,inclusive_us => 3680228,...},
%%%      #{calls => 100001,...}]}
%%% (A run on a machine at load 20: its times are other jobs' as much as its own.)
%%% '''
%%% (the figures of a run; `self %' is of the capture's whole time; a fun
%%% typed in the shell runs in erl_eval; the last line: the correction for
%%% tracing's cost, kprof_flame_summary).
-module(kprof_top).

-export([rows/2, text/2, print/2]).

-export_type([row/0]).

-type row() :: #{mfa := mfa() | term(),
                 calls := non_neg_integer(),
                 self_us := non_neg_integer(),
                 inclusive_us := non_neg_integer(),
                 self_pct := float()}.

%% @doc Rows from the sink's `[{MFA, Calls, InclusiveNs, SelfNs}]' (in the
%% capture's `top_by' order) and the capture's total microseconds.
-spec rows([{term(), non_neg_integer(), non_neg_integer(), non_neg_integer()}],
           non_neg_integer()) -> [row()].
rows(Raw, TotalUs) ->
    [#{mfa => MFA, calls => Calls, self_us => us(Self), inclusive_us => us(Incl),
       self_pct => pct(Self, TotalUs)}
     || {MFA, Calls, Incl, Self} <- Raw].

%% @doc The table as text: a header line naming how many functions of how
%% many, then a row per function. `Info' is the capture's: `total_us' and
%% the number of functions (`functions'); `names => elixir' names the
%% functions as Elixir does (kprof_names); `top_by' (self, inclusive or
%% calls) the order the header line names.
-spec text([row()], #{total_us := non_neg_integer(), functions := non_neg_integer(),
                      atom() => term()}) ->
          iolist().
text(Rows, Info = #{total_us := Total, functions := N}) ->
    Names = maps:get(names, Info, erlang),
    %% A sampled profile (kprof_sample) counts samples where a trace counts calls.
    {Who, Count} = case Info of
                       #{sampled := true} -> {"sample", "samples"};
                       _ -> {"flame", "calls"}
                   end,
    Order = case maps:get(top_by, Info, self) of
                self -> "self time";
                inclusive -> "inclusive time";
                calls -> Count
            end,
    [io_lib:format("kprof ~s: ~b of ~b functions, most ~s first (~ts ms in all)~n",
                   [Who, length(Rows), N, Order, ms(Total)]),
     io_lib:format("~ts~ts~ts~ts  function~n",
                   [lpad(Count, 11), lpad("self ms", 11), lpad("self %", 8),
                    lpad("incl ms", 11)])
     | [io_lib:format("~ts~ts~ts~ts  ~ts~n",
                      [lpad(integer_to_list(C), 11), lpad(ms(S), 11),
                       lpad(float_to_list(P, [{decimals, 1}]), 8), lpad(ms(I), 11),
                       kprof_names:mfa(MFA, Names)])
        || #{mfa := MFA, calls := C, self_us := S, inclusive_us := I, self_pct := P} <- Rows]].

%% @doc {@link text/2} to the calling process's group leader.
-spec print([row()], #{total_us := non_neg_integer(), functions := non_neg_integer(),
                       atom() => term()}) -> ok.
print(Rows, Info) ->
    io:put_chars(text(Rows, Info)).

%%%%%%%%%%%%%%%
%%% PRIVATE %%%
%%%%%%%%%%%%%%%

-spec us(non_neg_integer()) -> non_neg_integer().
us(Ns) -> (Ns + 500) div 1000.

-spec pct(non_neg_integer(), non_neg_integer()) -> float().
pct(_SelfNs, 0) -> 0.0;
pct(SelfNs, TotalUs) -> round(SelfNs * 10 / TotalUs) / 100.

-spec ms(non_neg_integer()) -> string().
ms(Us) -> float_to_list(Us / 1000, [{decimals, 3}]).

-spec lpad(string(), pos_integer()) -> string().
lpad(S, W) -> lists:duplicate(max(0, W - string:length(S)), $\s) ++ S.
