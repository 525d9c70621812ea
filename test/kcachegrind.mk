# The callgrind output in a real viewer (included by the top-level Makefile), a sibling
# of check-browser (test/browser.mk).
#   make check-kcachegrind   capture one GET /report of the demo's shop as callgrind
#                            (test/kcachegrind/capture.escript), open it in KCachegrind
#                            under Xvfb, show the call graph of shop_http:report/1 and
#                            save a screenshot (test/kcachegrind/shot.sh): the PNG is
#                            $(B)/kcachegrind/report.png, doc/img/ keeps a copy
# Installs kcachegrind, graphviz (its call graph), xvfb, xdotool and imagemagick with
# scripts/deps.sh kcachegrind.
KCG_OUT := $(B)/kcachegrind

.PHONY: check-kcachegrind
check-kcachegrind: all
	@scripts/deps.sh kcachegrind
	rm -rf $(KCG_OUT) && mkdir -p $(KCG_OUT) && chmod 700 $(KCG_OUT)
	escript test/kcachegrind/capture.escript $(abspath $(KCG_OUT)) erlang/ebin $(B)/shop/ebin
	test/kcachegrind/shot.sh $(abspath $(KCG_OUT)) $(abspath $(KCG_OUT))/report.png
