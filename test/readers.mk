# Every flame format fed to its own reader, warnings on (included by the top-level
# Makefile); a warning, a line the reader could not take or a non-zero exit fails:
#   make check-readers     callgrind_annotate (valgrind, a dependency of scripts/deps.sh)
#                          on the callgrind files; the .meta.json and speedscope JSON
#                          parsed strictly (perl's JSON::PP), the meta file's figures
#                          checked against the folded file
#   make check-flamegraph  FlameGraph's flamegraph.pl, difffolded.pl and
#                          stackcollapse-perf.pl under perl -w on the folded, calls
#                          and perf files. No Debian package has them: FLAMEGRAPH_DIR
#                          names a FlameGraph checkout, else PATH is searched
#                          (scripts/test.sh reports it SKIPPED when neither has them)
# speedscope's importer reads the same formats in make check-browser (test/browser.mk).
READERS_OUT := $(B)/readers

$(READERS_OUT)/formats: all test/readers/capture.escript
	rm -rf $(READERS_OUT) && mkdir -p $(READERS_OUT) && chmod 700 $(READERS_OUT)
	escript test/readers/capture.escript $(abspath $(READERS_OUT)) erlang/ebin

.PHONY: check-readers check-flamegraph
check-readers: $(READERS_OUT)/formats
	test/readers/check.sh $(READERS_OUT) annotate

check-flamegraph: $(READERS_OUT)/formats
	test/readers/check.sh $(READERS_OUT) flamegraph
