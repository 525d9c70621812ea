#!/usr/bin/env escript
%% -*- erlang -*-
%% scripts/doc_chunks.escript AppDir Source...
%% The modules' docs as EEP-48 chunks in AppDir/doc/chunks, where
%% code:get_doc/1 looks for them beside AppDir/ebin: `h(kprof)' in erl and
%% IEx's `h :kprof' show them. `make' writes erlang/doc/chunks; rebar3's
%% post-compile hook (rebar.config) writes $REBAR_BUILD_DIR/lib/kprof/doc/chunks,
%% whether kprof is the project or a dependency. Exits 1 when edoc fails.
main([AppDir | Sources]) when Sources =/= [] ->
    Opts = [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks},
            {dir, filename:join(AppDir, "doc")}, {preprocess, true},
            {includes, ["erlang/include"]}, {application, kprof}],
    case try edoc:files(Sources, Opts) catch Class:Reason -> {Class, Reason} end of
        ok -> ok;
        Other -> io:format(standard_error, "doc_chunks: edoc failed: ~p~n", [Other]),
                 halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: doc_chunks.escript AppDir Source...~n", []),
    halt(2).
