# Top-level convenience wrapper around CMake.
#
#   make / make all   bootstrap deps, configure + build build/ (RelWithDebInfo)
#   make test         build build/, build-asan/, build-tsan/ and run scripts/run-tests
#   make demo         build, then run build/quickstart
#   make install      cmake --install build --prefix $(PREFIX)
#   make clean        rm -rf build build-*
#
# Extra CMake arguments for every build dir: make KVP_CMAKE_ARGS='-DKVP_WERROR=OFF'

PREFIX         ?= /usr/local
JOBS           ?= 2
KVP_CMAKE_ARGS ?=

CMAKE          ?= cmake
MAKEFLAGS      += --no-print-directory

BUILD_DIR      := build
ASAN_DIR       := build-asan
TSAN_DIR       := build-tsan

NORMAL_ARGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo $(KVP_CMAKE_ARGS)
ASAN_ARGS   := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DKVP_SANITIZE=address -DKVP_DEBUG_LEVEL=2 $(KVP_CMAKE_ARGS)
TSAN_ARGS   := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DKVP_SANITIZE=thread -DKVP_DEBUG_LEVEL=1 $(KVP_CMAKE_ARGS)

# $(call kvp_configure,DIR,ARGS[,EXTRA]): (re)configure DIR only if it has never
# been configured or was configured with different ARGS (+ EXTRA stamp text).
# Later changes to CMakeLists.txt / globbed sources are picked up by
# `cmake --build` itself when building "all".
kvp_configure = stamp="$(strip $(2))$(3)"; if [ ! -f $(1)/CMakeCache.txt ] || [ "$$(cat $(1)/.kvp-configure-args 2>/dev/null)" != "$$stamp" ]; then echo "== configure $(1): $(strip $(2))"; $(CMAKE) -S . -B $(1) $(2) && echo "$$stamp" > $(1)/.kvp-configure-args; fi

.PHONY: all bootstrap compile compile-asan compile-tsan test demo install clean

all: bootstrap compile

bootstrap:
	@scripts/bootstrap

compile: bootstrap
	@$(call kvp_configure,$(BUILD_DIR),$(NORMAL_ARGS))
	@$(CMAKE) --build $(BUILD_DIR) --parallel $(JOBS)

compile-asan: bootstrap
	@$(call kvp_configure,$(ASAN_DIR),$(ASAN_ARGS))
	@$(CMAKE) --build $(ASAN_DIR) --parallel $(JOBS)

# TSan only matters for the threading tests: build just tests/test_thread*.c.
# Building named targets skips CMake's glob re-check, so the target list is
# part of the configure stamp: a new test_thread*.c triggers a reconfigure.
compile-tsan: bootstrap
	@targets="$$(echo $$(for f in tests/test_thread*.c; do [ -e "$$f" ] && basename "$$f" .c; done))"; \
	if [ -z "$$targets" ]; then echo "== $(TSAN_DIR): no tests/test_thread*.c, skipping"; exit 0; fi; \
	$(call kvp_configure,$(TSAN_DIR),$(TSAN_ARGS), targets=$$targets) && \
	$(CMAKE) --build $(TSAN_DIR) --parallel $(JOBS) --target $$targets

test: compile compile-asan compile-tsan
	@scripts/run-tests

demo: all
	@if [ ! -x $(BUILD_DIR)/quickstart ]; then echo "demo: $(BUILD_DIR)/quickstart not built (no examples/quickstart.c?)" >&2; exit 1; fi
	./$(BUILD_DIR)/quickstart

install: all
	$(CMAKE) --install $(BUILD_DIR) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD_DIR) build-*
