# The docs checker and its own test (included by the top-level Makefile; both run by
# scripts/test.sh's docs step).
#   make doccheck           every path, Module:function/Arity and `make target' that
#                           README.md, CONTRIBUTING.md, doc/*.md, examples/**/README* and the
#                           modules' edoc
#                           name must exist (scripts/doccheck.escript)
#                           (and the option tables, `make option-docs-check', first)
#   make doccheck-selftest  the checker on test/doccheck/dead.{md,c,sh} (a doc, a C file's
#                           comments, a script's comments, usage text and paths) must exit 1
#                           and print exactly test/doccheck/dead.expected: each dead name,
#                           no live one (options: the keys, values, formats and replay flags the
#                           table has), nothing from C code or string literals
.PHONY: doccheck doccheck-selftest
doccheck: all
	scripts/option_docs.escript check
	scripts/doccheck.escript

# The option tables of the docs (README.md, doc/*.md, the modules' edoc), generated
# from include/ks_options.h between `<!-- BEGIN option-docs Kind Mode` and
# `<!-- END option-docs Kind Mode -->' lines (scripts/option_docs.escript):
#   make option-docs        rewrite them (then commit the docs)
#   make option-docs-check  fail, naming each stale file, when one is not what
#                           option-docs writes (make doccheck runs it)
.PHONY: option-docs option-docs-check
option-docs: erl
	scripts/option_docs.escript write

option-docs-check: erl
	scripts/option_docs.escript check

doccheck-selftest: all
	@rm -f $(B)/doccheck-selftest.out
	@mkdir -p $(B)
	@scripts/doccheck.escript test/doccheck/dead.md test/doccheck/dead.c test/doccheck/dead.sh \
	  > $(B)/doccheck-selftest.out; rc=$$?; \
	if [ $$rc -ne 1 ]; then echo "doccheck-selftest: exit $$rc on a doc with dead names, not 1"; exit 1; fi
	@diff -u test/doccheck/dead.expected $(B)/doccheck-selftest.out && echo "doccheck-selftest: ok"

# The docs' shell sessions (README.md's first profiles, doc/flame.md's first capture,
# doc/guard.md's session) run against the product (scripts/readme_transcripts.escript).
#   make readme-check        the shapes they print (terms, table headers) are the docs'
#   make readme-transcripts  rewrite the sessions' outputs in the docs from a run (for the
#                            maintainer: read the diff, the prose cites some numbers)
.PHONY: readme-check readme-transcripts
readme-check: all
	scripts/readme_transcripts.escript check

readme-transcripts: all
	scripts/readme_transcripts.escript write
