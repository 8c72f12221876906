# SPDX-License-Identifier: Apache-2.0
# Top-level convenience wrapper around CMake.
#
#   make / make all   bootstrap deps, configure + build build/ (RelWithDebInfo)
#   make test         build build/, build-asan/, build-tsan/, build-fuzz/ and run
#                     scripts/run-tests (which includes a ~45 s fuzz smoke run)
#   make fuzz         run every fuzz target for FUZZ_SECONDS (default 60) each
#   make stress       long thread stress under TSan (KVP_STRESS_OPS ops/thread)
#   make coverage     build-cov/ (gcc --coverage): unit, model, misuse, failalloc
#                     tests + fuzz corpus replay; gcovr line coverage of src/
#   make demo         scripts/demo: build (with progress lines), then a report on
#                     the bundled Mooncake trace: hit rate by capacity and policy,
#                     the engine example with prefix caching on and off, and the
#                     benchmark against its targets
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
FUZZ_DIR       := build-fuzz
COV_DIR        := build-cov

FUZZ_SECONDS   ?= 60
KVP_STRESS_OPS ?= 400000
FUZZ_CC        ?= clang
FUZZ_CFLAGS    := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                  -fno-omit-frame-pointer -Wall -Wextra -Wpedantic -Wshadow -Werror \
                  -DKVP_DEBUG=1 -DKVP_BUILDING_LIBRARY -Iinclude -Isrc -Itests/support
# Fuzz targets: build-fuzz/fuzz_NAME from fuzz/fuzz_NAME.c plus
# FUZZ_SRCS_NAME, linked with FUZZ_LIBS_NAME.  fuzz_pool is the differential
# model fuzzer; the others feed a decoder the bytes a peer or a file controls.
FUZZ_TARGETS   := pool trace events
FUZZ_SRCS_pool := $(wildcard src/*.c) tests/support/model.c
FUZZ_LIBS_pool := -lcrypto -lxxhash -lpthread
# fuzz_trace: the CLI's trace line parser (tools/trace_json.cpp, simdjson;
# tools/trace.c; common.c needs the library for kvp_strerror).
FUZZ_SRCS_trace := tools/trace.c tools/common.c $(wildcard src/*.c)
FUZZ_CXXSRCS_trace := tools/trace_json.cpp
FUZZ_LIBS_trace := -lsimdjson -lisal -lcrypto -lxxhash -lpthread
# fuzz_events: the subscriber's decoder of event batches (network bytes).
FUZZ_SRCS_events := tools/event_decode.c
FUZZ_LIBS_events := -lmsgpackc -ljansson -lm
FUZZ_HDRS      := $(wildcard src/*.h) include/kvpool.h tests/support/model.h \
                  tools/trace.h tools/common.h tools/event_decode.h
# C++ parts of a target (FUZZ_CXXSRCS_NAME) are compiled by clang++ with the
# same sanitizers (the vptr check aside: it needs a C++ link) and linked in.
FUZZ_CXX       ?= clang++
FUZZ_CXXFLAGS  := -std=c++17 -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
                  -fno-sanitize=vptr -fno-sanitize-recover=all -fno-omit-frame-pointer \
                  -Wall -Wextra -Wpedantic -Wshadow -Werror

NORMAL_ARGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo $(KVP_CMAKE_ARGS)
ASAN_ARGS   := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DKVP_SANITIZE=address -DKVP_DEBUG_LEVEL=2 $(KVP_CMAKE_ARGS)
TSAN_ARGS   := -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DKVP_SANITIZE=thread -DKVP_DEBUG_LEVEL=1 $(KVP_CMAKE_ARGS)

# $(call kvp_configure,DIR,ARGS[,EXTRA]): (re)configure DIR only if it has never
# been configured or was configured with different ARGS (+ EXTRA stamp text).
# Later changes to CMakeLists.txt / globbed sources are picked up by
# `cmake --build` itself when building "all".
kvp_configure = stamp="$(strip $(2))$(3)"; if [ ! -f $(1)/CMakeCache.txt ] || [ "$$(cat $(1)/.kvp-configure-args 2>/dev/null)" != "$$stamp" ]; then echo "== configure $(1): $(strip $(2))"; $(CMAKE) -S . -B $(1) $(2) && echo "$$stamp" > $(1)/.kvp-configure-args; fi

.PHONY: all bootstrap compile compile-asan compile-tsan compile-fuzz test fuzz stress coverage demo install clean

all: bootstrap compile

bootstrap:
	@scripts/bootstrap

compile: bootstrap
	@$(call kvp_configure,$(BUILD_DIR),$(NORMAL_ARGS))
	@$(CMAKE) --build $(BUILD_DIR) --parallel $(JOBS)

compile-asan: bootstrap
	@$(call kvp_configure,$(ASAN_DIR),$(ASAN_ARGS))
	@$(CMAKE) --build $(ASAN_DIR) --parallel $(JOBS)

# TSan only matters for the tests that run threads: tests/test_thread*.c and
# tests/test_engine.c (decodes computed on two threads).
# Building named targets skips CMake's glob re-check, so the target list is
# part of the configure stamp: a new test_thread*.c triggers a reconfigure.
compile-tsan: bootstrap
	@targets="$$(echo $$(for f in tests/test_thread*.c tests/test_engine.c; do [ -e "$$f" ] && basename "$$f" .c; done))"; \
	if [ -z "$$targets" ]; then echo "== $(TSAN_DIR): no tests/test_thread*.c, skipping"; exit 0; fi; \
	$(call kvp_configure,$(TSAN_DIR),$(TSAN_ARGS), targets=$$targets) && \
	$(CMAKE) --build $(TSAN_DIR) --parallel $(JOBS) --target $$targets

# Each fuzzer is one clang command line (libFuzzer needs clang; the code under
# test is compiled into it with the same sanitizers); make's own dependency
# check keeps it incremental.
define kvp_fuzz_rule
$(FUZZ_DIR)/fuzz_$(1): fuzz/fuzz_$(1).c $(FUZZ_SRCS_$(1)) $(FUZZ_CXXSRCS_$(1)) $(FUZZ_HDRS)
	@mkdir -p $(FUZZ_DIR)
	@echo "== $(FUZZ_DIR): $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -> $$@"
	@$(foreach f,$(FUZZ_CXXSRCS_$(1)),$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -c $(f) -o $(FUZZ_DIR)/$(1)-$(notdir $(f)).o && ) \
	$(FUZZ_CC) $(FUZZ_CFLAGS) fuzz/fuzz_$(1).c $(FUZZ_SRCS_$(1)) \
	  $(foreach f,$(FUZZ_CXXSRCS_$(1)),$(FUZZ_DIR)/$(1)-$(notdir $(f)).o) $(FUZZ_LIBS_$(1)) \
	  $(if $(FUZZ_CXXSRCS_$(1)),-lstdc++) -o $$@
endef
$(foreach t,$(FUZZ_TARGETS),$(eval $(call kvp_fuzz_rule,$(t))))

compile-fuzz: bootstrap
	@$(MAKE) $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t))

test: compile compile-asan compile-tsan compile-fuzz
	@scripts/run-tests

# make fuzz: every target for FUZZ_SECONDS each, new inputs kept in
# build-fuzz/corpus-NAME (fuzz_pool: build-fuzz/corpus).
fuzz: compile-fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	  if [ $$t = pool ]; then c=fuzz/corpus; w=$(FUZZ_DIR)/corpus; len=1024; \
	  else c=fuzz/corpus-$$t; w=$(FUZZ_DIR)/corpus-$$t; len=4096; fi; \
	  mkdir -p $$w; echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  ./$(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=$$len -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/fuzz_$$t- $$w $$( [ -d $$c ] && echo $$c ); done

stress: compile-tsan
	@KVP_STRESS_OPS=$(KVP_STRESS_OPS) KVP_TEST_FILTER='test_thread_stress' KVP_TEST_VARIANTS=tsan \
	  scripts/run-tests

# Coverage: a separate gcc --coverage build of the library and the tests, the
# fuzzer compiled with fuzz/replay.c as main() and fed the corpus, then gcovr
# over src/ only.
coverage: bootstrap
	@$(call kvp_configure,$(COV_DIR),-DCMAKE_BUILD_TYPE=Debug -DKVP_COVERAGE=ON -DKVP_DEBUG_LEVEL=0 $(KVP_CMAKE_ARGS))
	@$(CMAKE) --build $(COV_DIR) --parallel $(JOBS)
	@find $(COV_DIR) -name '*.gcda' -delete
	@for t in $$(for f in tests/test_*.c; do basename $$f .c; done | grep -v '^test_thread'); do \
	  if [ -x $(COV_DIR)/$$t ]; then echo "== coverage: $$t"; \
	    KVP_TEST_SCALE=0.2 KVP_SOURCE_DIR=$(CURDIR) ./$(COV_DIR)/$$t >$(COV_DIR)/$$t.log 2>&1 \
	      || echo "   ($$t failed: see $(COV_DIR)/$$t.log)"; fi; done
	@echo "== coverage: fuzz corpus replay (gcc, fuzz/replay.c)"
	@rm -rf $(COV_DIR)/replay && mkdir -p $(COV_DIR)/replay && cd $(COV_DIR)/replay && \
	  gcc -std=c11 -O0 -g --coverage -I$(CURDIR)/include -I$(CURDIR)/tests/support \
	    $(CURDIR)/fuzz/fuzz_pool.c $(CURDIR)/tests/support/model.c $(CURDIR)/fuzz/replay.c \
	    $(CURDIR)/$(COV_DIR)/libkvpool.a $(FUZZ_LIBS_pool) -o fuzz_replay && \
	  ./fuzz_replay $(CURDIR)/fuzz/corpus $$( [ -d $(CURDIR)/$(FUZZ_DIR)/corpus ] && echo $(CURDIR)/$(FUZZ_DIR)/corpus ) \
	    >fuzz_replay.log 2>&1; tail -n 1 fuzz_replay.log
	@gcovr --root . --filter 'src/' --object-directory $(COV_DIR) \
	  --print-summary --txt $(COV_DIR)/coverage.txt $(COV_DIR) >/dev/null 2>$(COV_DIR)/gcovr.err || \
	  { cat $(COV_DIR)/gcovr.err; exit 1; }
	@cat $(COV_DIR)/coverage.txt

# make demo prints a report: the bootstrap and the build go to a log
# (build/demo.log, shown when they fail), with a progress line every 10 s.
demo:
	@scripts/demo $(BUILD_DIR)

install: all
	$(CMAKE) --install $(BUILD_DIR) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD_DIR) build-*
