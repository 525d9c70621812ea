# make check-mix: the mix project of examples/mix_demo, which uses kprof from
# this checkout as a path dependency (built by kprof's mix.exs, no rebar3),
# built and its ExUnit tests run (kprof from Elixir: keyword options, binary
# paths, the top table, no log line at IEx's level). scripts/test.sh skips it,
# loudly, when elixir cannot be installed.
.PHONY: check-mix
check-mix: all
	@scripts/deps.sh mix
	cd examples/mix_demo && MIX_ENV=test mix test
