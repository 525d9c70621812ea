# Erlang side of the build (included by the top-level Makefile, which sets B and SINK).
#   make erl          erlang/src -> erlang/ebin (kprof.app lists every module)
#   make eunit        end-to-end EUnit tests against erlang/priv/kprof_sink
#   make recordings   rewrite test/data/*.{bin,txt} from a live VM
ERLC_FLAGS := -Wall +debug_info
ERL_SRC   := $(wildcard erlang/src/*.erl)
ERL_BEAM  := $(ERL_SRC:erlang/src/%.erl=erlang/ebin/%.beam)
erl_comma := ,
erl_empty :=
erl_space := $(erl_empty) $(erl_empty)
erl_csv    = $(subst $(erl_space),$(erl_comma),$(strip $(1)))
ERL_MODS  := $(call erl_csv,$(ERL_SRC:erlang/src/%.erl=%))

erl: $(ERL_BEAM) erlang/ebin/kprof.app

# The one table of options and formats (include/ks_options.h) as Erlang terms:
# generated, ignored by git, rebuilt when the table or its generator changes.
ERL_OPTS_HRL := erlang/include/kprof_options.hrl
$(ERL_OPTS_HRL): include/ks_options.h scripts/gen_options.escript
	scripts/gen_options.escript include/ks_options.h $@
$(ERL_BEAM): $(ERL_OPTS_HRL)

erlang/ebin/%.beam: erlang/src/%.erl $(wildcard erlang/include/*.hrl) | erlang/ebin
	erlc $(ERLC_FLAGS) -I erlang/include -o erlang/ebin $<

erlang/ebin/kprof.app: erlang/src/kprof.app.src $(ERL_SRC) | erlang/ebin
	sed 's/{modules, \[\]}/{modules, [$(ERL_MODS)]}/' $< > $@

# EUnit, end to end against the real sink: erlang/test/*.erl -> _build/test/ebin.
ERL_TEST_SRC  := $(wildcard erlang/test/*.erl)
ERL_TEST_BEAM := $(ERL_TEST_SRC:erlang/test/%.erl=$(B)/test/ebin/%.beam)
ERL_TEST_MODS := $(call erl_csv,$(ERL_TEST_SRC:erlang/test/%.erl=%))

# The whole log goes to the terminal and to $(B)/eunit.log; on failure the
# failing tests are printed again at the end, where a CI tail shows them.
eunit: erl $(SINK) $(NIF) $(FAULT_SINK) $(ERL_TEST_BEAM)
	@rm -f $(B)/eunit.rc
	{ erl -noshell -pa erlang/ebin -pa $(B)/test/ebin \
	  -eval 'case eunit:test([$(ERL_TEST_MODS)], [verbose]) of ok -> halt(0); _ -> halt(1) end'; \
	  echo $$? > $(B)/eunit.rc; } 2>&1 | tee $(B)/eunit.log
	@rc=$$(cat $(B)/eunit.rc); if [ "$$rc" != 0 ]; then \
	  echo "== eunit failures (full log: $(B)/eunit.log) =="; \
	  grep -n -B2 -A40 '\*failed\*\|\*\*\* context\|\*timed out\*\|\*skipped\*\|::error' $(B)/eunit.log | head -200; \
	  exit $$rc; fi

$(B)/test/ebin/%.beam: erlang/test/%.erl $(ERL_BEAM) | $(B)/test/ebin
	erlc $(ERLC_FLAGS) -I erlang/include -pa erlang/ebin -o $(B)/test/ebin $<

# Trace streams of the real VM for the C tests: test/record -> test/data/*.{bin,txt}.
# Re-run by hand (the files are committed); see test/data/README.md.
REC_SRC  := $(wildcard test/record/*.erl)
REC_BEAM := $(REC_SRC:test/record/%.erl=$(B)/record/%.beam)

recordings: $(REC_BEAM)
	erl -noshell -pa $(B)/record -s kprof_record main test/data

$(B)/record/%.beam: test/record/%.erl | $(B)/record
	erlc $(ERLC_FLAGS) -o $(B)/record $<

$(B)/record:
	mkdir -p $@

# edoc of erlang/src -> _build/doc/index.html; fails on an edoc warning or on an
# exported function without a doc (scripts/docs.escript).
.PHONY: docs
docs: $(ERL_OPTS_HRL)
	scripts/docs.escript $(B)/doc $(ERL_SRC)
