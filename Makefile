# Runnel's entry points. `make run` and `make test` work on a fresh Debian machine.
#   make run    install what is missing, build Release, start one node on 127.0.0.1:9092
#   make test   install what is missing, check formatting and clang-tidy on what changed,
#               build the libFuzzer targets with clang and run them for a bounded time, then
#               build with clang, ASan+UBSan (and -Werror=thread-safety) and run every test
#   make bench  build Release and run the benchmarks under bench/
#   make soak   build Release and run the Raft simulator over SEEDS seeds of long runs
#               for 3 and for 5 voters, and the replication simulator for 3 and 5 replicas
#               (a failing seed is printed with how to replay it)
#   make fmt    clang-format every C++ file
#   make peers  resolve Apache Kafka 4.4 (broker, tools, Connect, Streams) from Maven into
#               ~/.cache/runnel-peers (RUNNEL_PEERS_CACHE), for the compat tests, and build
#               their client programs there (Java client 4.4, a PyPI venv, franz-go)
#   make compat build Release and run tests/compat (Kafka 4.4's own tools) against Kafka 4.4,
#               the judge, then against a Runnel node (COMPAT_TESTS picks the test modules)
#   make fmt-check  fail, naming the files, when a C++ file differs from what clang-format writes
#   make thread-safety  check the lock annotations with clang -Wthread-safety (parse only; make
#               test's clang build compiles every source with -Werror=thread-safety anyway)
#   make tidy   clang-tidy (.clang-tidy's checks) over every source; about half an hour
#   make tidy-changed   the same over what differs from TIDY_BASE (origin/main, else main)

CONFIG ?= config/runnel.properties
JOBS ?= $(shell nproc)
RELEASE_DIR := build/release
SEEDS ?= 20000
TEST_DIR := build/asan
# Configured with clang, never built: its compile_commands.json and generated headers serve
# the parse-only checks (scripts/clang_build.py).
CLANG_CHECK_DIR := build/tidy
FUZZ_DIR := build/fuzz
COMPAT_TESTS ?= test_topics test_topic_partitions test_console test_groups test_metadata_quorum \
  test_java_client test_python_clients test_go_client test_perf_tools test_features
# What tidy-changed compares with; empty: origin/main, else main (on main itself: HEAD~1).
TIDY_BASE ?=
CMAKE_COMMON := -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON

.PHONY: all deps build run test unit-test fuzz-test bench soak fmt fmt-check thread-safety \
	tidy tidy-changed clean peers compat

all: build

deps:
	@scripts/install-deps

build: deps
	cmake -S . -B $(RELEASE_DIR) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=Release -DRUNNEL_TESTS=OFF
	cmake --build $(RELEASE_DIR) -j $(JOBS)

run: build
	@mkdir -p data
	exec $(RELEASE_DIR)/bin/runnel --config $(CONFIG)

# The style checks run first (seconds); the fuzzers next, so that the closing CTest summary is
# the whole suite's. The test build uses clang: a cold build takes a third of GCC's time (and
# checks the lock annotations); `make build` (GCC, Release) stays what `make run` serves.
test: fmt-check tidy-changed fuzz-test unit-test

unit-test: deps
	cmake -S . -B $(TEST_DIR) $(CMAKE_COMMON) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=Debug -DRUNNEL_SANITIZE=ON
	cmake --build $(TEST_DIR) -j $(JOBS)
	cd $(TEST_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ../../scripts/ctest-with-timings -j $(JOBS) --timeout 600

fuzz-test: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) $(CMAKE_COMMON) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRUNNEL_FUZZ=ON
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	cd $(FUZZ_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	bench/run-all $(RELEASE_DIR)

soak: build
	$(RELEASE_DIR)/bin/runnel-raft-soak --nodes 3 --seeds $(SEEDS) --steps 5000
	$(RELEASE_DIR)/bin/runnel-raft-soak --nodes 5 --seeds $(SEEDS) --steps 5000
	$(RELEASE_DIR)/bin/runnel-replication-soak --replicas 3 --seeds $(SEEDS) --steps 20000
	$(RELEASE_DIR)/bin/runnel-replication-soak --replicas 5 --seeds $(SEEDS) --steps 20000

# Exit 3 of clients prepare: a client that cannot be had here (its tests skip), said on stderr.
peers: deps
	scripts/peers/kafka prepare
	scripts/peers/clients prepare || [ $$? -eq 3 ]

# Kafka first: a compat test that fails against Kafka 4.4 is a wrong test.
compat: build peers
	cd tests/compat && RUNNEL_COMPAT_TARGET=kafka python3 -m unittest -v $(COMPAT_TESTS)
	cd tests/compat && RUNNEL_COMPAT_TARGET=runnel RUNNEL_BIN_DIR=$(CURDIR)/$(RELEASE_DIR)/bin \
	  python3 -m unittest -v $(COMPAT_TESTS)

fmt: deps
	git ls-files '*.cc' '*.h' | xargs clang-format -i

fmt-check: deps
	scripts/fmt-check

thread-safety: deps
	nice scripts/thread-safety-check -j $(JOBS) --build-dir $(CLANG_CHECK_DIR)

tidy: deps
	nice scripts/tidy -j $(JOBS) --build-dir $(CLANG_CHECK_DIR)

tidy-changed: deps
	nice scripts/tidy -j $(JOBS) --build-dir $(CLANG_CHECK_DIR) --changed $(TIDY_BASE)

clean:
	rm -rf build
