# make check-mix: the mix project of examples/mix_demo, which uses kprof from
# this checkout as a rebar3 dependency, built and its ExUnit tests run (kprof
# from Elixir: keyword options, binary paths, the top table). Debian's elixir
# has no rebar3 of its own: MIX_REBAR3 points mix at Debian's. scripts/test.sh
# skips it, loudly, when elixir cannot be installed.
.PHONY: check-mix
check-mix: all
	@scripts/deps.sh mix
	cd examples/mix_demo && MIX_REBAR3="$$(command -v rebar3)" MIX_ENV=test mix test
