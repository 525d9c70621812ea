# make check-rebar3: the rebar3 tools a user runs in a clone stay clean.
#   rebar3 xref and rebar3 dialyzer exit 0 (rebar.config says which checks
#   and why); the compile post-hook leaves EEP-48 chunks beside rebar3's ebin
#   (h(kprof) in `rebar3 shell'); rebar3 edoc writes under _build, never into
#   the markdown docs of doc/. The first dialyzer run builds its PLT (about a
#   minute), later runs reuse it. rebar3 eunit is not run here: `make eunit`
#   runs the same suites.
R3_CHUNK := _build/default/lib/kprof/doc/chunks/kprof.chunk

.PHONY: check-rebar3
check-rebar3: all
	@scripts/deps.sh rebar3
	rm -f $(R3_CHUNK)
	rebar3 xref
	rebar3 dialyzer
	@test -f $(R3_CHUNK) || { echo "check-rebar3: rebar3 compile left no $(R3_CHUNK)"; exit 1; }
	rebar3 edoc
	@test -f _build/edoc/kprof.html || { echo "check-rebar3: rebar3 edoc wrote no _build/edoc/kprof.html"; exit 1; }
	@if git status --porcelain --ignored doc | grep -q .; then \
	  echo "check-rebar3: rebar3 edoc wrote into doc/:"; git status --porcelain --ignored doc; exit 1; fi
