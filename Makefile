SHELL := /bin/bash
# softrnic: `make` alone lists the targets. See README.md.

GO        ?= go
FUZZTIME  ?= 30s
# How long the fuzzer may minimize each new interesting input (go test's
# default, 60s, stops a slow target's progress for that long each time:
# its rate reads 0/sec).
FUZZMINTIME ?= 2s
BENCHTIME ?= 1s
BENCH     ?= .

.DEFAULT_GOAL := help
.PHONY: help build libs libs-deps test lint bench bench-frames bench-cache bench-write bench-reliability fuzz generate demo interop interop-loss perf-veth bench-compare bench-capi bench-rxe bench-plots soak clean

help: ## list the targets
	@echo "usage: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The version softrnic version prints: the checkout's description (GOFLAGS
# may turn the build info's VCS stamp off).
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)

build: ## build bin/softrnic
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o bin/softrnic ./cmd/softrnic

# The C libraries (host/capi): libsoftrnic.so is the NIC (Go, c-shared);
# libibverbs.so.1 and librdmacm.so.1 are rdma-core's ABI over it, built
# against Debian's rdma-core headers; libmlx5.so.1 and libefa.so.1 stand
# in for the provider libraries Debian's perftest links.
CAPI      := host/capi
CAPI_C    := $(CAPI)/c
CAPI_GO   := $(wildcard $(CAPI)/*.go) $(CAPI)/srn.h
LIB_CFLAGS := -O2 -g -fPIC -Wall -Werror -fvisibility=hidden -I$(CAPI) -DSOFTRNIC_VERSION='"$(VERSION)"'
LIBS      := lib/libsoftrnic.so lib/libibverbs.so.1 lib/librdmacm.so.1 lib/libmlx5.so.1 lib/libefa.so.1

libs: libs-deps $(LIBS) ## build lib/: libibverbs.so.1 and friends, for unmodified C programs (installs gcc and rdma-core's headers if missing)

libs-deps:
	@command -v gcc >/dev/null && [ -f /usr/include/infiniband/verbs.h ] && [ -f /usr/include/rdma/rdma_cma.h ] || { \
		echo "installing gcc, libibverbs-dev and librdmacm-dev"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libibverbs-dev librdmacm-dev >/dev/null; }

lib/libsoftrnic.so: $(CAPI_GO) $(shell find datapath host ctxcache reliability hpu bpf -name '*.go' -not -name '*_test.go' 2>/dev/null)
	@mkdir -p lib
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -ldflags='-extldflags=-Wl,-soname,libsoftrnic.so' -o $@ ./$(CAPI)
	@rm -f lib/libsoftrnic.h

lib/libibverbs.so.1: $(CAPI_C)/verbs.c $(CAPI_C)/misc.c $(CAPI_C)/softrnic.h $(CAPI_C)/libibverbs.map $(CAPI)/srn.h lib/libsoftrnic.so
	gcc $(LIB_CFLAGS) -shared -Wl,--version-script=$(CAPI_C)/libibverbs.map -Wl,-soname,libibverbs.so.1 \
		-o $@ $(CAPI_C)/verbs.c $(CAPI_C)/misc.c -Llib -lsoftrnic -Wl,-rpath,'$$ORIGIN' -lpthread

lib/librdmacm.so.1: $(CAPI_C)/cma.c $(CAPI_C)/rsocket.c $(CAPI_C)/softrnic.h $(CAPI_C)/librdmacm.map $(CAPI)/srn.h lib/libibverbs.so.1
	gcc $(LIB_CFLAGS) -shared -Wl,--version-script=$(CAPI_C)/librdmacm.map -Wl,-soname,librdmacm.so.1 \
		-o $@ $(CAPI_C)/cma.c $(CAPI_C)/rsocket.c -Llib -l:libibverbs.so.1 -lsoftrnic -Wl,-rpath,'$$ORIGIN' -lpthread

lib/libmlx5.so.1: $(CAPI_C)/mlx5.c $(CAPI_C)/mlx5.map
	gcc -O2 -fPIC -shared -Wall -Werror -Wl,--version-script=$(CAPI_C)/mlx5.map -Wl,-soname,libmlx5.so.1 -o $@ $<

lib/libefa.so.1: $(CAPI_C)/efa.c $(CAPI_C)/efa.map
	gcc -O2 -fPIC -shared -Wall -Werror -Wl,--version-script=$(CAPI_C)/efa.map -Wl,-soname,libefa.so.1 -o $@ $<

lint: ## check formatting and run go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

test: libs lint ## run every test with the race detector (as root, the namespace tests too), the C libraries' C test programs among them
	$(GO) test -race -count=1 ./...

bench: ## run the benchmarks (BENCH=regexp, BENCHTIME=1s)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) ./...

bench-frames: build ## frame rates of the xsk and udp ports vs kernel UDP and iperf3 over a veth pair (root)
	./bin/softrnic bench frames

bench-cache: build ## GCCache against the blocking baseline: latency, head-of-line blocking, host fetches, throughput
	./bin/softrnic bench cache

bench-write: build ## RDMA WRITE 64 KiB throughput over a veth pair beside the raw xsk frame rate (root)
	./bin/softrnic bench write

bench-reliability: build ## replay allocation vs throughput, a shallow queue, random loss, stall isolation (in-memory port)
	./bin/softrnic bench replay
	./bin/softrnic bench shallow
	./bin/softrnic bench loss
	./bin/softrnic bench isolation

# A run that ends only in "context deadline exceeded" (the go fuzzer's
# shutdown at -fuzztime racing a busy worker, with no failing input) is run
# once more; any failing input fails the target.
fuzz: ## run every fuzz target for FUZZTIME (default 30s) each
	@set -e; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for file in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
		dir=$$(dirname $$file); \
		for name in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$file | cut -d' ' -f2); do \
			for try in 1 2; do \
				echo "== $$dir $$name ($(FUZZTIME))"; \
				if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) $$dir 2>&1 | tee $$log; [ $${PIPESTATUS[0]} = 0 ]; then break; fi; \
				if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input' $$log; then \
					echo "== $$name: the fuzzer's shutdown timed out (no failing input); once more"; continue; \
				fi; \
				exit 1; \
			done; \
		done; \
	done

generate: ## regenerate generated code: the XDP program's bpf2go output (installs clang if missing)
	@command -v clang >/dev/null && [ -f /usr/include/bpf/bpf_helpers.h ] || { \
		echo "installing clang, llvm and libbpf-dev"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang llvm libbpf-dev >/dev/null; }
	$(GO) generate ./...

demo: build ## the main job: SEND/RECV, WRITE, WRITE_WITH_IMM, READ, CMP_AND_SWAP, FETCH_AND_ADD verified between two NICs over a veth pair, then sPIN handlers (aggregation, key-value cache) (root)
	./bin/softrnic demo
	./bin/softrnic demo -hpu

interop: build libs ## softrnic perf and Debian's binaries on lib/ against perftest on the kernel's rdma_rxe in a VM, both directions, every cell (root, ../shared)
	bash tests/interop/interop.sh

bench-compare: build ## softrnic perf beside sockperf, iperf3 and the raw xsk frame rate on one veth pair, interleaved rounds, #13's goals as ratios (root)
	bash tests/bench/compare.sh

bench-capi: build libs ## unmodified ib_write_bw and ib_write_lat on lib/libibverbs.so.1 beside softrnic perf on one veth pair: the ratios (root; installs perftest)
	bash tests/bench/capi.sh

bench-plots: build ## SVG plots in bench-plots/: bandwidth against message size, latency CDF against UDP, QP scaling with both caches (root)
	bash tests/bench/plots.sh

bench-rxe: build libs ## softrnic perf and Debian's perftest on lib/ beside perftest on rdma_rxe inside one emulated VM (../shared/tools/rxe-vm): the ratios (root)
	bash tests/bench/rxe.sh

perf-veth: build ## softrnic perf write-bw and write-lat between two softrnic NICs over a veth pair (root)
	bash tests/interop/perf-veth.sh

interop-loss: build ## softrnic rping and perf -R against rdma_rxe in a VM through a bridge dropping LOSS % (default 5) of RoCEv2 frames each way (root, ../shared)
	bash tests/interop/lossy.sh

soak: build ## a long perf run (1,000 QPs, 10 min) sampling both sides' RSS, judged flat after warm-up (root; QPS, SECS, TEST override)
	bash tests/bench/soak.sh

clean: ## remove build output
	rm -rf bin lib
