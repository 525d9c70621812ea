#!/usr/bin/env escript
%%! -noshell
%% `make docs': edoc of the given modules into OutDir (HTML), then two checks
%% that fail the build: edoc printed no warning, and every exported function
%% has a doc (@doc or @equiv; internal exports say @private or @hidden).
%%
%%   scripts/docs.escript OutDir File.erl...
-mode(compile).

main([Dir | Files]) when Files =/= [] ->
    Opts = [{dir, Dir}, {preprocess, true}, {includes, ["erlang/include"]},
            {application, kprof}],
    {Html, HtmlOut} = captured(fun() -> edoc:files(Files, Opts) end),
    ChunkDir = filename:join(Dir, ".chunks"),
    {Chunks, ChunkOut} = captured(fun() ->
                                          edoc:files(Files, [{doclet, edoc_doclet_chunks},
                                                             {layout, edoc_layout_chunks},
                                                             {dir, ChunkDir} | Opts])
                                  end),
    Output = HtmlOut ++ ChunkOut,
    io:put_chars(Output),
    Warnings = [L || L <- string:split(Output, "\n", all), string:find(L, "warning") =/= nomatch],
    Undocumented = case Chunks of
                       ok -> lists:append([undocumented(ChunkDir, F) || F <- Files]);
                       _ -> []
                   end,
    [io:format("no doc: ~s~n", [U]) || U <- Undocumented],
    case {Html, Chunks, Warnings, Undocumented} of
        {ok, ok, [], []} ->
            io:format("docs: ~s/index.html (~b modules)~n", [Dir, length(Files)]);
        _ ->
            io:format("docs: ~b edoc warnings, ~b exported functions without a doc~n",
                      [length(lists:usort(Warnings)), length(Undocumented)]),
            halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: scripts/docs.escript OutDir File.erl...~n", []),
    halt(2).

%% Exported functions of File whose doc is missing or empty.
undocumented(ChunkDir, File) ->
    Mod = filename:basename(File, ".erl"),
    {ok, Bin} = file:read_file(filename:join([ChunkDir, "chunks", Mod ++ ".chunk"])),
    {docs_v1, _, _, _, ModDoc, _, Docs} = binary_to_term(Bin),
    Exports = exports(File),
    [Mod ++ " (module doc)" || not has_doc(ModDoc)]
        ++ [lists:flatten(io_lib:format("~s:~s/~b", [Mod, F, A]))
            || {{function, F, A}, _, _, Doc, _} <- Docs,
               lists:member({F, A}, Exports), not has_doc(Doc)].

has_doc(hidden) -> true;                         % @private, @hidden
has_doc(#{<<"en">> := Text}) when is_binary(Text) -> string:trim(Text) =/= <<>>;
has_doc(#{<<"en">> := Html}) -> Html =/= [];           % application/erlang+html
has_doc(_) -> false.

exports(File) ->
    {ok, Forms} = epp:parse_file(File, [{includes, ["erlang/include"]}]),
    lists:append([Fs || {attribute, _, export, Fs} <- Forms]).

%% Run Fun with its output collected: {Result, Text}.
captured(Fun) ->
    Collector = spawn_link(fun() -> collect([]) end),
    Old = group_leader(),
    group_leader(Collector, self()),
    try Fun() of
        Result -> {Result, text(Collector)}
    catch
        Class:Reason -> {{Class, Reason}, text(Collector)}
    after
        group_leader(Old, self())
    end.

text(Collector) ->
    Collector ! {text, self()},
    receive {text, Collector, T} -> T end.

%% A minimal io server: keeps what is written, answers the rest with an error.
collect(Acc) ->
    receive
        {io_request, From, Ref, Req} ->
            {Reply, Acc1} = io_request(Req, Acc),
            From ! {io_reply, Ref, Reply},
            collect(Acc1);
        {text, From} ->
            From ! {text, self(), unicode:characters_to_list(lists:reverse(Acc))},
            collect(Acc)
    end.

io_request({put_chars, Enc, Chars}, Acc) ->
    {ok, [unicode:characters_to_list(Chars, Enc) | Acc]};
io_request({put_chars, Enc, M, F, A}, Acc) ->
    io_request({put_chars, Enc, apply(M, F, A)}, Acc);
io_request({put_chars, Chars}, Acc) ->
    io_request({put_chars, latin1, Chars}, Acc);
io_request({put_chars, M, F, A}, Acc) ->
    io_request({put_chars, latin1, M, F, A}, Acc);
io_request({requests, Reqs}, Acc) ->
    lists:foldl(fun(R, {_, A}) -> io_request(R, A) end, {ok, Acc}, Reqs);
io_request({get_geometry, _}, Acc) ->
    {{error, enotsup}, Acc};
io_request(getopts, Acc) ->
    {[{binary, false}, {encoding, unicode}], Acc};
io_request(_, Acc) ->
    {{error, request}, Acc}.
