# kprof as a dependency, the way a user takes it (included by the top-level Makefile).
#   make check-deps   from a file:// clone of HEAD, offline, in a temporary directory:
#                     the preflight's messages, a fresh rebar3 app (compile, a flame
#                     graph, a release and bin/x eval of a tiers run and its report), a
#                     fresh mix project (compile with mix alone, mix run, the docs), and
#                     the .app.src's `files' alone built as a dependency
#                     (scripts/check_deps.sh)
# Needs rebar3 and elixir (scripts/deps.sh mix installs them); commit first: what
# is not committed is not checked.
.PHONY: check-deps
check-deps:
	@scripts/deps.sh mix
	scripts/check_deps.sh
