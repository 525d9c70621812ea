#!/usr/bin/env escript
%% -*- erlang -*-
%% scripts/otp_bench_table.escript Results OtpDir
%% Writes the section "Other OTPs side by side" of Results (bench/RESULTS.md)
%% from the benches scripts/otp_make.sh ran on each OTP: OtpDir/N/bench/B.md
%% is the copy of RESULTS.md `make B' rewrote inside OTP N's root. Each
%% bench's table is taken from its own section there and its rows set side
%% by side, a column per OTP, with each newer OTP's ratio to the oldest's;
%% a bench not run on an OTP is a "-" column, said so.
-mode(compile).

%% {Bench, the section it writes, its key columns, the columns compared, the
%% rows said in words below the table (key prefixes)}.
benches() ->
    [{"bench-overhead", "Cost per event", ["tracer"],
      ["ns/event in the traced process", "slowest round's (ms)"],
      [["kprof_tracer NIF ring"], ["null erl_tracer NIF"], ["kprof_sink"], ["process tracer"]]},
     {"bench-real", "Flame on real workloads: kprof, eprof, fprof, eflame, eflambe",
      ["workload", "tool"], ["to files ms", "to files / eprof"],
      [["compile", "kprof"], ["compile", "eprof"], ["xmerl", "kprof"], ["digraph", "kprof"]]}].

main([Results, OtpDir]) ->
    Otps = lists:sort(fun(A, B) -> list_to_integer(A) =< list_to_integer(B) end,
                      [filename:basename(D) || D <- filelib:wildcard(filename:join(OtpDir, "[0-9]*")),
                                               filelib:is_dir(filename:join(D, "bench"))]),
    Parts = [part(B, OtpDir, Otps) || B <- benches()],
    Text = ["`make bench-otps BENCH=bench-overhead` and `make bench-otps BENCH=bench-real` ",
            "(test/otp.mk, scripts/otp_make.sh): each bench of this file run in the Debian root of ",
            "each OTP (scripts/otp_root.sh: bookworm, trixie, sid), its sink and NIF built there by ",
            "that system's gcc, then its rows set side by side here by scripts/otp_bench_table.escript. ",
            "Each OTP's run is its own: the load of each is given, and a ratio across OTPs is only as ",
            "good as the two runs' conditions were alike.\n\n",
            [[P, "\n"] || P <- Parts]],
    write_section(Results, "Other OTPs side by side", lists:flatten(Text)),
    io:format("otp_bench_table: wrote \"Other OTPs side by side\" in ~s (OTPs ~s)~n",
              [Results, lists:join(", ", Otps)]);
main(_) ->
    io:format(standard_error, "usage: otp_bench_table.escript Results OtpDir~n", []),
    halt(2).

part({Bench, Title, Keys, Values, Said}, OtpDir, Otps) ->
    Runs = [{Otp, section(filename:join([OtpDir, Otp, "bench", Bench ++ ".md"]), Title)}
            || Otp <- Otps],
    Had = [{Otp, S} || {Otp, S} <- Runs, S =/= none],
    case Had of
        [] -> ["### ", Title, "\n\n`", Bench, "` not run through `make bench-otps` yet (on this ",
               "system alone, its own section above has it): `make bench-otps BENCH=", Bench,
               "` runs it on each OTP.\n"];
        _ -> table(Bench, Title, Keys, Values, Said, Had, OtpDir)
    end.

table(Bench, Title, Keys, Values, Said, Had, OtpDir) ->
    Tables = [{Otp, rows(S)} || {Otp, S} <- Had],
    Order = lists:foldl(fun({_, {_, Rows}}, Acc) ->
                                Acc ++ [K || R <- Rows, K <- [key(R, Keys)], not lists:member(K, Acc)]
                        end, [], Tables),
    Names = [{Otp, version(OtpDir, Otp)} || {Otp, _} <- Had],
    Head = Keys ++ [V ++ ", " ++ N || V <- Values, {_, N} <- Names]
        ++ ["over " ++ element(2, hd(Names)) || length(Names) > 1],
    Body = [Key
            ++ [value(Otp, Tables, Key, V) || V <- Values, {Otp, _} <- Names]
            ++ [ratios(Names, Tables, Key, hd(Values)) || length(Names) > 1]
            || Key <- Order],
    ["### ", Title, " (`", Bench, "`)\n\n",
     [["- ", N, ": ", measured(S), "\n"] || {{_, N}, {_, S}} <- lists:zip(Names, Had)],
     "\n", md_row(Head), md_row(["---" || _ <- Keys] ++ ["--:" || _ <- tl(Head) -- tl(Keys)]),
     [md_row(R) || R <- Body],
     [["\nWhat the newer OTPs change (", hd(Values), "; this run's figures, each OTP's run at its own load):\n\n",
       [said(Prefix, Order, Names, Tables, hd(Values)) || Prefix <- Said]] || length(Names) > 1]].

%% A sentence for the first row whose key starts with Prefix: its value on
%% each OTP and each newer one's ratio to the first's.
said(Prefix, Order, Names, Tables, Col) ->
    case [K || K <- Order, lists:all(fun({P, C}) -> lists:prefix(P, C) end,
                                     lists:zip(Prefix, lists:sublist(K, length(Prefix))))] of
        [Key | _] ->
            ["- ", lists:join(", ", Key), ": ",
             lists:join(", ", [[value(Otp, Tables, Key, Col), " on ", N] || {Otp, N} <- Names]),
             " (", ratios(Names, Tables, Key, Col), ")\n"];
        [] -> []
    end.

%% The section's provenance lines: when, where, the load.
measured(Section) ->
    When = [string:trim(L) || L <- string:split(Section, "\n", all), lists:prefix("Measured", L)],
    Load = case re:run(Section, "[Ll]oad average[^:]*: [0-9. /]*[0-9]", [{capture, first, list}]) of
               {match, [L]} -> [L];
               nomatch -> []
           end,
    %% bench-overhead's verdict, the ring over the VM's dispatch floor.
    Floor = [string:trim(L) || L <- string:split(Section, "\n", all), lists:prefix("The ring against", L)],
    lists:join(" ", When ++ [L ++ "." || L <- Load] ++ Floor).

value(Otp, Tables, Key, Col) ->
    {Otp, {Head, Rows}} = lists:keyfind(Otp, 1, Tables),
    case [R || R <- Rows, key(R, Key) =:= Key] of
        [R | _] -> col(R, Head, Col);
        [] -> "-"
    end.

%% Each newer OTP's value over the first's: "27: 1.05x, 29: 0.93x".
ratios([{First, _} | Newer], Tables, Key, Col) ->
    Base = number(value(First, Tables, Key, Col)),
    lists:flatten(lists:join(", ", [ratio(N, Base, number(value(Otp, Tables, Key, Col)))
                                    || {Otp, N} <- Newer])).

ratio(Name, B, V) when is_number(B), is_number(V), B > 0 ->
    io_lib:format("~s: ~.2fx", [major(Name), V / B]);
ratio(Name, _, _) -> major(Name) ++ ": -".

%% "OTP 27.3.4.1" -> "27".
major(Name) -> hd(string:split(lists:last(string:split(Name, " ")), ".")).

number(S) ->
    case string:to_float(S) of
        {F, _} when is_float(F) -> F;
        _ -> case string:to_integer(S) of {I, _} when is_integer(I) -> I; _ -> none end
    end.

version(OtpDir, Otp) ->
    case file:read_file(filename:join([OtpDir, Otp, "summary"])) of
        {ok, <<"OTP ", Rest/binary>>} -> "OTP " ++ hd(string:split(binary_to_list(Rest), " "));
        _ -> "OTP " ++ Otp
    end.

%% The first markdown table of a section: {Header, Rows}, each a list of cells.
rows(Section) ->
    Lines = [L || L <- string:split(Section, "\n", all), lists:prefix("|", L)],
    case Lines of
        [H, _ | Rs] -> T = [cells(H) | [cells(R) || R <- Rs]], {hd(T), tl(T)};
        _ -> {[], []}
    end.

cells(Line) ->
    [string:trim(C) || C <- tl(lists:droplast(string:split(Line, "|", all)))].

%% A row's key: its first cells, one per key column.
key(Row, Keys) -> lists:sublist(Row, length(Keys)).

col(Row, Head, Col) ->
    case string:str(Head, [Col]) of
        0 -> "-";
        I when I =< length(Row) -> lists:nth(I, Row);
        _ -> "-"
    end.

md_row(Cells) -> ["| ", lists:join(" | ", Cells), " |\n"].

%% The text of "## Title" up to the next "## " in File, or none.
section(File, Title) ->
    case file:read_file(File) of
        {ok, Bin} ->
            Text = unicode:characters_to_list(Bin),
            Head = "## " ++ Title ++ "\n",
            case string:find(Text, Head) of
                nomatch -> none;
                From ->
                    Rest = string:slice(From, length(Head)),
                    case string:find(Rest, "\n## ") of
                        nomatch -> Rest;
                        Next -> string:slice(Rest, 0, length(Rest) - length(Next))
                    end
            end;
        _ -> none
    end.

%% Replaces (or appends) "## Title" up to the next "## " of File.
write_section(File, Title, Body) ->
    {ok, Bin} = file:read_file(File),
    Text = unicode:characters_to_list(Bin),
    Head = "## " ++ Title ++ "\n",
    New = Head ++ "\n" ++ Body,
    Out = case string:find(Text, Head) of
              nomatch -> string:trim(Text, trailing) ++ "\n\n" ++ New;
              From ->
                  Before = string:slice(Text, 0, length(Text) - length(From)),
                  Rest = string:slice(From, length(Head)),
                  After = case string:find(Rest, "\n## ") of
                              nomatch -> "";
                              Next -> string:slice(Next, 1)
                          end,
                  Before ++ New ++ case After of "" -> ""; _ -> "\n" ++ After end
          end,
    ok = file:write_file(File, unicode:characters_to_binary(Out)).
