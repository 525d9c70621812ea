# Erlang side of the build (included by the top-level Makefile).
ERL_SRC   := $(wildcard erlang/src/*.erl)
ERL_BEAM  := $(ERL_SRC:erlang/src/%.erl=erlang/ebin/%.beam)

erl: $(ERL_BEAM) erlang/ebin/kprof.app

erlang/ebin/%.beam: erlang/src/%.erl $(wildcard erlang/include/*.hrl) | erlang/ebin
	erlc -Wall +debug_info -I erlang/include -o erlang/ebin $<

erlang/ebin/kprof.app: erlang/src/kprof.app.src | erlang/ebin
	cp $< $@
