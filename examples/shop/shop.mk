# The example shop (examples/shop), included by the top-level Makefile.
#   make shop    examples/shop/src -> _build/shop/ebin (templates stay in examples/shop/templates)
SHOP_SRC  := $(wildcard examples/shop/src/*.erl)
SHOP_BEAM := $(SHOP_SRC:examples/shop/src/%.erl=$(B)/shop/ebin/%.beam)

.PHONY: shop
shop: $(SHOP_BEAM)

$(B)/shop/ebin/%.beam: examples/shop/src/%.erl | $(B)/shop/ebin
	erlc $(ERLC_FLAGS) -o $(B)/shop/ebin $<

$(B)/shop/ebin:
	mkdir -p $@
