# The single-file examples (examples/*.erl), included by the top-level Makefile.
#   make examples   examples/*.erl -> _build/examples/ebin (part of `make`, so that
#                   an API change that breaks them breaks the build)
# examples/tiers_shop.erl: the tiers session of kprof's module doc (erlang/src/kprof.erl),
#   erl -noshell -pa erlang/ebin -pa _build/examples/ebin -eval 'tiers_shop:run(), halt().'
EXAMPLES_SRC  := $(wildcard examples/*.erl)
EXAMPLES_BEAM := $(EXAMPLES_SRC:examples/%.erl=$(B)/examples/ebin/%.beam)

.PHONY: examples
examples: $(EXAMPLES_BEAM)

$(B)/examples/ebin/%.beam: examples/%.erl $(ERL_BEAM) | $(B)/examples/ebin
	erlc $(ERLC_FLAGS) -pa erlang/ebin -o $(B)/examples/ebin $<

$(B)/examples/ebin:
	mkdir -p $@
