# The flame outputs in real viewers (included by the top-level Makefile).
#   make check-browser   capture a known call tree with kprof:flame_apply/2, then load
#                        the speedscope JSON, perf script and folded stacks into
#                        speedscope (its npm package's build, served on 127.0.0.1) and
#                        click, hover and search the SVG, in headless Chromium
# Installs chromium (and node/npm if missing) with scripts/deps.sh browser, and
# test/browser's node_modules with npm ci (package-lock.json pins them).
BROWSER_DIR := test/browser
BROWSER_OUT := $(B)/browser

.PHONY: check-browser
check-browser: all $(B)/test/ebin/kprof_flame_tests.beam
	@scripts/deps.sh browser
	@cd $(BROWSER_DIR) && if [ ! -d node_modules/playwright-core ] || [ ! -d node_modules/speedscope ] || \
	  [ package-lock.json -nt node_modules/.package-lock.json ]; then npm ci --no-audit --no-fund; fi
	rm -rf $(BROWSER_OUT) && mkdir -p $(BROWSER_OUT)
	escript $(BROWSER_DIR)/capture.escript $(BROWSER_OUT) erlang/ebin $(B)/test/ebin
	node $(BROWSER_DIR)/check.js $(BROWSER_OUT)

# The volume capture of kprof_flame_tests with 10 million events instead of the 1 million
# of `make eunit`: prints events/s, the sink's peak RSS (VmHWM) and the time to write
# each format. Takes a minute or two.
.PHONY: check-flame-volume
check-flame-volume: all $(B)/test/ebin/kprof_flame_tests.beam
	KPROF_FLAME_EVENTS=10000000 erl -noshell -pa erlang/ebin -pa $(B)/test/ebin \
	  -eval 'case eunit:test({generator, kprof_flame_tests, flame_volume_test_}, [verbose]) of ok -> halt(0); _ -> halt(1) end'
