# kernelhost. `make run` builds and serves on 127.0.0.1:49999 (KERNELHOST_* env
# vars and ARGS="-flag=value" pass through); `make test` installs missing test
# dependencies and runs every test. Build outputs go under bin/.

GO       ?= go
GOROOT   := $(shell $(GO) env GOROOT)
TOOLS    := $(CURDIR)/bin/tools
SDKTEST  := hostcmd/sdktest

# wazero runs the core's tests compiled for WebAssembly (GOOS=wasip1).
WAZERO_VERSION := v1.12.0
WAZERO         := $(TOOLS)/wazero

# Debian packages the tests need; each is installed only when missing.
# (nodejs and npm: the official-SDK test; the Jupyter transport adds its own.)
APT_PACKAGES := nodejs

# Benchmarks: `make bench BENCH=RoundTrip BENCHTIME=2000x`.
BENCH     ?= .
BENCHTIME ?= 1s

.PHONY: all build run test test-go test-wasm deps deps-apt deps-npm bench vet clean

all: build

## build: bin/kernelhost
build:
	$(GO) build -o bin/kernelhost ./hostcmd

## run: build and serve (settings: KERNELHOST_* env vars or ARGS)
run: build
	./bin/kernelhost $(ARGS)

## test: install missing test dependencies, then all tests with -race, then
## the core's tests compiled for WebAssembly under wazero
test: deps test-go test-wasm

test-go:
	$(GO) test -race -count=1 ./...

test-wasm: $(WAZERO)
	GOOS=wasip1 GOARCH=wasm GOWASIRUNTIME=wazero PATH="$(TOOLS):$$PATH" \
		$(GO) test -count=1 -exec="$(GOROOT)/lib/wasm/go_wasip1_wasm_exec" ./core/...

$(WAZERO):
	GOBIN=$(TOOLS) $(GO) install github.com/tetratelabs/wazero/cmd/wazero@$(WAZERO_VERSION)

deps: deps-apt deps-npm

# Installs only the packages dpkg does not know as installed.
deps-apt:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# The official SDK, pinned by package-lock.json.
deps-npm: $(SDKTEST)/node_modules/.package-lock.json

$(SDKTEST)/node_modules/.package-lock.json: $(SDKTEST)/package.json $(SDKTEST)/package-lock.json
	cd $(SDKTEST) && npm ci --no-audit --no-fund

## bench: host vs direct-kernel round trip, and a 200,000-line stream
bench:
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -count=1 ./hostcmd/server/

## vet: gofmt check and go vet
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Room for: generate (protobuf), policies (bin/policies/*.wasm), plugins
# (bin/plugins/*), Jupyter test dependencies.

clean:
	rm -rf bin
