%%% @doc The tier report ({@link kprof_report}) rendered: as a text table
%%% ({@link text/2}), as JSON ({@link json/1}), and the way both write a time
%%% in ms ({@link format_ms/1}). kprof_report merges and builds; this module
%%% only lays out what it built.
-module(kprof_report_render).

-include("kprof_report.hrl").

-export([text/2, json/1, format_ms/1]).

-define(ID_WIDTH, 40).
-define(VAL_WIDTH, 7).
-define(TEXT_LIMIT, 50).
%% Functions per identity in the text's full-trace tables.
-define(FULL_TEXT_TOP, 10).

%%%%%%%%%%%%
%%% TEXT %%%
%%%%%%%%%%%%

%% @doc The report as a table (iodata): a header line, the tiers with
%% `mean' and `p99' (self or inclusive time, option `time'), `other',
%% the `all' row, then at most `limit' (50) identities, most requests
%% first, and the slowest requests.
-spec text(kprof_report:report(), map()) -> iolist().
text(R = #{tiers := Tiers, all := All, rows := Rows}, Opts) ->
    Time = maps:get(time, Opts, maps:get(time, R)),
    Limit = maps:get(limit, Opts, ?TEXT_LIMIT),
    Shown = case Limit of
                infinity -> Rows;
                _ -> lists:sublist(Rows, Limit)
            end,
    Lines = [{"all", All} | [{identity_text(Id), Row} || #{identity := Id} = Row <- Shown]],
    IdW = max(12, lists:max([string:length(L) || {L, _} <- Lines])),
    ReqW = max(4, lists:max([length(integer_to_list(N)) || {_, #{requests := N}} <- Lines])),
    Widths = [max(2 * ?VAL_WIDTH, length(atom_to_list(T)) + 1) || T <- Tiers],
    Head1 = [pad("identity", IdW), "  ", pad("reqs", ReqW), "  ",
             [pad(atom_to_list(T), W) || {T, W} <- lists:zip(Tiers, Widths)], "other"],
    Head2 = [lists:duplicate(IdW + ReqW + 4, $\s),
             [[pad("mean", W - ?VAL_WIDTH), pad("p99", ?VAL_WIDTH)] || W <- Widths], "mean"],
    Body = [[pad(L, IdW), "  ", lpad(integer_to_list(N), ReqW), "  ",
             [[vpad(format_ms(maps:get(mean, maps:get(Time, TS))), W - ?VAL_WIDTH),
               vpad(format_ms(maps:get(p99, maps:get(Time, TS))), ?VAL_WIDTH)]
              || {TS, W} <- lists:zip(TierStats, Widths)],
             format_ms(maps:get(mean, Other))]
            || {L, #{requests := N, tiers := TierStats, other := Other}} <- Lines],
    More = case length(Rows) - length(Shown) of
               0 -> [];
               K -> [io_lib:format("(~b more identities: option limit)", [K])]
           end,
    Table = [header_line(R)] ++ drop_lines(R) ++ [[time_line(Time), sorted_text(R)], Head1, Head2 | Body]
        ++ More ++ slow_lines(R)
        ++ full_lines(maps:get(full_trace, R, undefined), maps:get(names, Opts, erlang)),
    [[string:trim(Line, trailing), $\n] || Line <- Table].

%% What was counted and lost, under the header's total: each cap's drops
%% (a line only when something was lost), and the trace patterns put back
%% after a code reload. Full trace's drops are in its own section.
-spec drop_lines(kprof_report:report()) -> [iolist()].
drop_lines(R) ->
    Get = fun(K) -> maps:get(K, R, 0) end,
    Tables = [{Get(K), Name} || {K, Name} <- [{sink_dropped_pids, "pids"},
                                              {sink_dropped_mfas, "MFAs"},
                                              {sink_dropped_names, "names"}]],
    Parts = [io_lib:format(Format, [N]) || {N, Format} <-
                 [{Get(dropped_requests), "~b requests (in-flight cap max_inflight)"},
                  {Get(abandoned), "~b requests abandoned (open past max_request_ms)"},
                  {Get(killed_requests), "~b requests killed (their process exited before "
                   "their end; times not recorded)"},
                  {Get(dropped_events), "~b events (max_request_events)"},
                  {Get(sink_dropped), "~b trace messages in the sink"},
                  {Get(ring_drops), "~b events lost in the tracer's ring (full)"},
                  {Get(ring_unsupported), "~b events the tracer could not write to its ring "
                   "(an identity too big for a record, ...)"},
                  {Get(ring_unresolved), "~b ring events of pids the sink's table refused"},
                  {Get(ring_bad), "~b ring records the sink could not take (a table full, "
                   "or malformed)"}], N > 0]
        ++ [["sink tables full, new keys refused: ",
             lists:join(", ", [io_lib:format("~b ~ts", [N, Name]) || {N, Name} <- Tables])]
            || lists:any(fun({N, _}) -> N > 0 end, Tables)],
    [["dropped: ", lists:join("; ", Parts)] || Parts =/= []]
        ++ [io_lib:format("trace patterns put back after code reload: ~b", [Get(reapplied)])
            || Get(reapplied) > 0].

%% Per full-traced identity, its top functions by inclusive time.
-spec full_lines(undefined | map(), kprof_names:style()) -> [iolist()].
full_lines(undefined, _Names) ->
    [];
full_lines(Full = #{identities := Ids, dropped_requests := DR, dropped_events := DE,
                    truncated := Tr}, Names) ->
    DN = maps:get(dropped_nodes, Full, lists:sum([maps:get(dropped_nodes, I, 0) || I <- Ids])),
    Head = io_lib:format("full trace: ~b identities; top functions by inclusive time, ms "
                         "summed over requests (dropped requests ~b, events ~b, call paths ~b; "
                         "truncated ~b)", [length(Ids), DR, DE, DN, Tr]),
    [Head |
     lists:append(
       [[io_lib:format("  ~ts: ~b requests, ~ts ms in all~ts",
                       [identity_text(Id), N, format_ms(Total),
                        case maps:get(dropped_nodes, Ident, 0) of
                            0 -> "";
                            D -> io_lib:format(", ~b call paths dropped (full_trace_max_nodes)",
                                               [D])
                        end]),
         io_lib:format("    ~ts~ts~ts  function", [lpad("calls", 9), lpad("incl", 9),
                                                    lpad("self", 9)])
         | [io_lib:format("    ~ts~ts~ts  ~ts", [lpad(integer_to_list(C), 9),
                                                  lpad(lists:flatten(format_ms(I)), 9),
                                                  lpad(lists:flatten(format_ms(S)), 9),
                                                  kprof_names:mfa(MFA, Names)])
            || #{mfa := MFA, calls := C, inclusive := I, self := S}
                   <- lists:sublist(Mfas, ?FULL_TEXT_TOP)]]
        || #{identity := Id, requests := N, total := Total, mfas := Mfas} = Ident <- Ids])].


-spec header_line(kprof_report:report()) -> iolist().
header_line(R = #{nodes := Nodes, traced_s := Traced, requests := Requests,
                  seen := Seen, sampled := Sampled, events := Events, dropped := Dropped,
                  inflight := Inflight}) ->
    Window = case maps:get(window_s, R) of
                 undefined -> "";
                 W -> io_lib:format(" (window ~ts s)", [format_num(W)])
             end,
    SeenText = case Seen of
                   0 -> "";
                   _ -> io_lib:format(" (seen ~b, sampled ~b)", [Seen, Sampled])
               end,
    io_lib:format("kprof tiers on ~ts: ~ts s traced~ts, requests ~b recorded~ts, "
                  "~b in flight, events ~b, dropped ~b, ~ts~ts~ts",
                  [lists:join(", ", [atom_to_list(N) || N <- Nodes]), format_num(Traced),
                   Window, Requests, SeenText, Inflight, Events, Dropped,
                   [state_text(R), overhead_text(R)],
                   incomplete_text(R), missing_text(R)]).

%% "; INCOMPLETE: ...": a sink that did not answer in time, or died, and
%% what its rows are as of.
-spec incomplete_text(kprof_report:report()) -> iolist().
incomplete_text(R) ->
    OnNode = length(maps:get(nodes, R, [])) > 1,
    case maps:get(incomplete, R, []) of
        [] ->
            [];
        Incomplete ->
            ["; INCOMPLETE: ",
             lists:join("; ", [incomplete_part(I, OnNode) || I <- Incomplete])]
    end.

%% "; MISSING: c@host (noconnection)": the nodes that gave no report.
-spec missing_text(kprof_report:report()) -> iolist().
missing_text(R) ->
    case maps:get(missing, R, []) of
        [] -> [];
        Missing -> ["; MISSING: ",
                    lists:join(", ", [io_lib:format("~ts (~0tp)", [atom_to_list(N), Why])
                                      || {N, Why} <- Missing])]
    end.

-spec incomplete_part(map(), boolean()) -> iolist().
incomplete_part(I = #{node := N}, OnNode) ->
    Where = [[" on ", atom_to_list(N)] || OnNode],
    Polled = maps:get(polled_at, I, undefined),
    case maps:get(reason, I) of
        no_answer ->
            io_lib:format("the sink~ts did not answer within ~ts s: ~ts",
                          [Where, format_secs(maps:get(waited_ms, I, 0)),
                           case Polled of
                               undefined -> "no rows polled yet";
                               _ -> ["rows as of its last poll at ", Polled]
                           end]);
        _ ->
            io_lib:format("the sink~ts died at ~ts: ~ts",
                          [Where, maps:get(at, I, <<"?">>),
                           case Polled of
                               undefined -> "every row it held is lost (no poll before)";
                               _ -> ["the events it read after its last poll at ", Polled,
                                     " are lost"]
                           end])
    end.

%% "tracing ABORTED: overload (lag 1.8 s > 1.0 s) at 2026-...Z": what
%% tripped, the measured figure and the bound; the node too when the tiers
%% run on several.
-spec state_text(kprof_report:report()) -> iolist().
state_text(R = #{aborted := [_ | _] = Aborted}) ->
    OnNode = length(maps:get(nodes, R, [])) > 1,
    ["tracing ABORTED: ",
     lists:join("; ", [[maps:get(message, A, io_lib:format("~0tp", [Reason])),
                        [[" on ", atom_to_list(N)] || OnNode], " at ", T]
                       || #{node := N, reason := Reason, time := T} = A <- Aborted])];
state_text(#{active := true}) ->
    "tracing on";
state_text(_) ->
    "tracing stopped".

%% "; max_overhead 0.02: sample 0.25 (lowered), tracing 3.1 % of the CPU",
%% on the nodes started with max_overhead (kprof_tiers_cost).
-spec overhead_text(kprof_report:report()) -> iolist().
overhead_text(R) ->
    OnNode = length(maps:get(nodes, R, [])) > 1,
    case [O || #{max_overhead := Max} = O <- maps:get(overhead, R, []), Max =/= undefined] of
        [] ->
            [];
        Os ->
            ["; ", lists:join("; ", [overhead_part(O, OnNode) || O <- Os])]
    end.

-spec overhead_part(map(), boolean()) -> iolist().
overhead_part(#{node := N, max_overhead := Max, sample := Sample, lowered := Lowered} = O,
              OnNode) ->
    Share = case maps:get(share, O, undefined) of
                undefined -> "";
                X -> io_lib:format(", tracing ~ts % of the CPU", [format_num(100 * X)])
            end,
    [[[atom_to_list(N), " "] || OnNode], "max_overhead ", format_num(Max), ": sample ",
     format_num(Sample), [" (lowered)" || Lowered], Share].

-spec time_line(self | inclusive) -> string().
%% "; sorted by ...", when the rows are not in the default order.
-spec sorted_text(kprof_report:report()) -> iolist().
sorted_text(#{sorted_by := {Col, Stat}}) -> io_lib:format("; sorted by ~ts ~ts", [Col, Stat]);
sorted_text(#{sorted_by := Col}) -> io_lib:format("; sorted by ~ts", [Col]);
sorted_text(_) -> [].

time_line(self) ->
    "times in ms; per tier its self time (time in its own code); other: time in no tier";
time_line(inclusive) ->
    "times in ms; per tier its inclusive time (a frame of it open); other: time in no tier".

-spec slow_lines(kprof_report:report()) -> [iolist()].
slow_lines(#{slow := []}) ->
    [];
slow_lines(#{slow := Slow}) ->
    ["slowest requests (wall ms, identity, pid, start, self ms per tier):" |
     [io_lib:format("  ~ts  ~ts  ~0p  ~ts ~ts  other ~ts",
                    [format_ms(Wall), identity_text(Id), Pid, Start,
                     [[" ", atom_to_list(T), " ", format_ms(S)] || #{tier := T, self := S} <- Tiers],
                     format_ms(Other)])
      || #{wall := Wall, identity := Id, pid := Pid, start := Start, tiers := Tiers,
           other := Other} <- Slow]].

%% @doc Milliseconds with three significant digits: `0.412', `1.90',
%% `12.3', `1234'.
-spec format_ms(number()) -> string().
format_ms(X) when X == 0 -> "0";
format_ms(X) when X >= 99.95 -> integer_to_list(round(X));
format_ms(X) when X >= 9.995 -> io_lib:format("~.1f", [float(X)]);
format_ms(X) when X >= 0.9995 -> io_lib:format("~.2f", [float(X)]);
format_ms(X) -> io_lib:format("~.3f", [float(X)]).

-spec format_secs(non_neg_integer()) -> string().
format_secs(Ms) when Ms rem 1000 =:= 0 -> integer_to_list(Ms div 1000);
format_secs(Ms) -> format_num(Ms / 1000).

-spec format_num(number()) -> string().
format_num(X) when is_integer(X) -> integer_to_list(X);
format_num(X) -> lists:flatten(format_ms(X)).

-spec identity_text(term()) -> string().
identity_text(Id) ->
    Text = lists:flatten(io_lib:format("~0tp", [Id])),
    case string:length(Text) > ?ID_WIDTH of
        true -> string:slice(Text, 0, ?ID_WIDTH - 3) ++ "...";
        false -> Text
    end.

%% Left-aligned in W columns (callers leave room for a space).
-spec pad(string(), non_neg_integer()) -> iolist().
pad(S, W) ->
    [S, lists:duplicate(max(0, W - string:length(S)), $\s)].

%% A value: left-aligned, and at least one space after it.
-spec vpad(string(), non_neg_integer()) -> iolist().
vpad(S, W) ->
    [S, lists:duplicate(max(1, W - string:length(S)), $\s)].

-spec lpad(string(), non_neg_integer()) -> iolist().
lpad(S, W) ->
    [lists:duplicate(max(0, W - length(S)), $\s), S].

%%%%%%%%%%%%
%%% JSON %%%
%%%%%%%%%%%%

%% @doc The report as JSON (a UTF-8 binary). Identities, pids and other
%% terms JSON has no type for become their `~0p' text; atoms and binaries
%% strings.
-spec json(kprof_report:report()) -> binary().
json(Report) ->
    Rows = [json_row(R) || R <- maps:get(rows, Report)],
    Slow = [S#{identity => json_identity(Id)} || #{identity := Id} = S <- maps:get(slow, Report)],
    Aborted = [A#{reason => text(Reason), info => text(Info)}
               || #{reason := Reason, info := Info} = A <- maps:get(aborted, Report)],
    Missing = [#{node => N, reason => text(Why)} || {N, Why} <- maps:get(missing, Report, [])],
    unicode:characters_to_binary(
      encode(Report#{rows => Rows, slow => Slow, aborted => Aborted, missing => Missing,
                     all => json_row(maps:get(all, Report))})).

-spec json_row(kprof_report:row()) -> map().
json_row(Row = #{identity := Id}) ->
    Row#{identity => json_identity(Id)}.

-spec json_identity(term()) -> binary() | atom().
json_identity(Id) when is_binary(Id); is_atom(Id) -> Id;
json_identity(Id) -> text(Id).

-spec text(term()) -> binary().
text(Term) ->
    unicode:characters_to_binary(io_lib:format("~0tp", [Term])).

-spec encode(term()) -> iolist().
encode(M) when is_map(M) ->
    [${, lists:join($,, [[string(key(K)), $:, encode(V)]
                         || {K, V} <- lists:sort(maps:to_list(M))]), $}];
encode(L) when is_list(L) ->
    [$[, lists:join($,, [encode(V) || V <- L]), $]];
encode(true) -> "true";
encode(false) -> "false";
encode(null) -> "null";
encode(undefined) -> "null";
encode(A) when is_atom(A) -> string(atom_to_binary(A));
encode(B) when is_binary(B) -> string(B);
encode(I) when is_integer(I) -> integer_to_binary(I);
encode(F) when is_float(F) -> float_to_binary(F, [short]);
encode(T) -> string(text(T)).

-spec key(term()) -> binary().
key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_binary(K) -> K;
key(K) -> text(K).

-spec string(binary()) -> iolist().
string(B) ->
    case unicode:characters_to_list(B) of
        Chars when is_list(Chars) -> [$", [escape(C) || C <- Chars], $"];
        _ -> string(text(B))     % not UTF-8: its ~p text
    end.

-spec escape(char()) -> iodata().
escape($") -> "\\\"";
escape($\\) -> "\\\\";
escape($\n) -> "\\n";
escape($\r) -> "\\r";
escape($\t) -> "\\t";
escape(C) when C < 16#20 -> io_lib:format("\\u~4.16.0b", [C]);
escape(C) -> <<C/utf8>>.
