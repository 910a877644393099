# kernelhost. `make run` builds the host and its transport plugins and serves
# on 127.0.0.1:49999 (KERNELHOST_* env vars and ARGS="-flag=value" pass
# through); `make test` installs missing test dependencies and runs every
# test. Build outputs go under bin/: bin/kernelhost, bin/plugins/ (found next
# to the executable), bin/policies/. `make install` copies them under
# $(DESTDIR)$(PREFIX); `make release` builds trimmed archives into dist/.

GO       ?= go
GOROOT   := $(shell $(GO) env GOROOT)
TOOLS    := $(CURDIR)/bin/tools
SDKTEST  := hostcmd/sdktest

# Version info stamped into bin/kernelhost (kernelhost version).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/kernelhost/kernelhost/hostcmd/internal/buildinfo
# The Go runtime's default GODEBUG, compiled into the host (bin/kernelhost;
# testkit.Kernelhost builds it the same way). schedtrace keeps the runtime's
# sysmon thread out of its deep sleep, from which the first system call
# after every idle pause woke it to poll every 20 us: per `1+1` a fifth of
# the host's CPU on a VM where each wake-up is a call into the hypervisor.
# The period, 2^31-1 ms (24.8 days), is how often it prints its trace line.
# The transport plugins get it too (make plugins; testkit.Plugins the
# same): sysmon's wake-ups were half of a plugin's context switches per
# `1+1`. They run with one P (GOMAXPROCS 1), and with sysmon backed off to
# 10 ms a goroutine blocked in a system call keeps that P for up to that
# long, so the subprocess plugin waits for its interpreters' exits on the
# netpoller (transports/subprocess/exitwait.go) rather than in waitid
# (javascript contexts took 35 ms instead of 13 before it did). Not the
# example plugin, which waits for its bash in waitid. docs/RATIONALE.md,
# "The Go runtime's sysmon kept out of its deep sleep", has the figures
# and the cost; TestInstall checks that the go command adds no default of
# its own, which this would replace.
RUNTIME_LDFLAGS := -X=runtime.godebugDefault=schedtrace=2147483647
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) $(RUNTIME_LDFLAGS)

# make install: PREFIX/bin/kernelhost, PREFIX/lib/kernelhost/plugins (where
# the installed binary looks for its plugins: ../lib/kernelhost/plugins from
# its own directory), PREFIX/share/kernelhost/policies. DESTDIR stages it.
PREFIX  ?= /usr/local
DESTDIR ?=
# The transport plugins installed and released (not the example plugin).
INSTALL_PLUGINS := subprocess jupyter

# make release: one archive per platform, laid out like an install.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64

# wazero runs the core's tests compiled for WebAssembly (GOOS=wasip1).
WAZERO_VERSION := v1.12.0
WAZERO         := $(TOOLS)/wazero

# Debian packages the tests need; each is installed only when missing.
# nodejs: the official-SDK test; jupyter-server and python3-ipykernel: the
# Jupyter transport's tests against a real server; r-cran-irkernel: the R
# kernel (kernel spec "ir") those tests also run; r-base-core and
# default-jdk-headless: the subprocess transport's r (Rscript) and java
# (jshell) contexts; wabt (wat2wasm): the
# WebAssembly policy modules written in WAT; curl: the docs' examples
# (TestDocExamples); systemd: systemd-analyze, which verifies
# deploy/kernelhost.service (TestInstall); python3-notebook: what Kernel
# Gateway 2.5.2 (../shared/third_party, run by the gateway tests) runs on;
# python3-ipython and python3-matplotlib: IPython cell semantics and inline
# figures in the subprocess python driver (its tests run /usr/bin/python3);
# python3-pandas and python3-pil, with matplotlib: the charts, data and images
# of the python environment (transports/kernelpy; its tests run /usr/bin/python3 too);
# bubblewrap (bwrap): the sandbox each subprocess interpreter runs in;
# passt (pasta): the user-mode network stack that gives a sandboxed context
# outbound network from a network namespace of its own
# (-context-network=isolated, the default; docs/RATIONALE.md, "Network").
APT_PACKAGES := nodejs jupyter-server python3-ipykernel r-cran-irkernel r-base-core default-jdk-headless wabt curl systemd python3-notebook python3-ipython python3-matplotlib python3-pandas python3-pil bubblewrap passt

# make run-jupyter: the Jupyter Server it starts (loopback only).
JUPYTER_PORT ?= 8888
JUPYTER_DIR  := $(CURDIR)/bin/jupyter

# Fuzzing: `make fuzz` runs every target below for FUZZTIME. `make test`
# fuzzes only FUZZ_QUICK, each for the number of executions after its name:
# pure-Go parsers whose instrumented builds are small. FUZZ_SLOW's targets
# start real interpreters or a host per input, and fuzzing them needs a
# fuzz-instrumented build of their whole package graph (the host's is esbuild,
# grpc and wazero; every package of a -fuzz build, std included, is compiled
# anew with coverage instrumentation), most of what fuzzing in make test
# cost; they are fuzzed by `make fuzz` only. Every target's seed corpus
# (testdata/fuzz/ and f.Add) still runs as a plain test in test-go. make
# test counts executions instead of timing them because Go 1.26's fuzz
# coordinator can fail a run that found nothing with a bare "context
# deadline exceeded" when -fuzztime's clock ends while a worker is mid-input
# (go.dev/issue/75804, fixed in Go 1.27): a count has no clock to race. The
# counts are a few seconds of fuzzing each on 2 cores.
FUZZTIME     ?= 60s
FUZZ_QUICK := \
	./transports/jupyter:FuzzDecodeFrame:20000 \
	./plugins/policy:FuzzDecodeOutput:20000 \
	./plugins/policy:FuzzReservedWAT:10000 \
	./plugins/policy/policysdk:FuzzDecodeCanonical:20000 \
	./core/engine:FuzzAppendLine:20000 \
	./core/engine:FuzzPythonLiteral:20000
FUZZ_SLOW := \
	./hostcmd/server:FuzzExecuteRequest \
	./transports/subprocess:FuzzEnvValueRoundTrip \
	./transports/subprocess:FuzzCwdRoundTrip
FUZZ_TARGETS := $(FUZZ_QUICK) $(FUZZ_SLOW)

# Executions of the isolation soak in test-faults and soak.
SOAK ?= 10000

# Benchmarks: `make bench BENCH=RoundTrip BENCHTIME=2000x`.
BENCH     ?= .
BENCHTIME ?= 1s

.PHONY: all build install release plugins policies generate run run-jupyter test test-go test-go-faults test-wasm test-fuzz test-faults soak run-faults fuzz run-fuzz deps deps-apt deps-npm deps-jupyter bench vet clean

all: build

## build: bin/kernelhost, stamped with VERSION and COMMIT
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/kernelhost ./hostcmd

## install: the host, its transport plugins and the example policies under
## $(DESTDIR)$(PREFIX) (PREFIX ?= /usr/local)
install: build plugins policies
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/kernelhost/plugins $(DESTDIR)$(PREFIX)/share/kernelhost/policies
	install -m 0755 bin/kernelhost $(DESTDIR)$(PREFIX)/bin/kernelhost
	install -m 0755 $(addprefix bin/plugins/kernelhost-transport-,$(INSTALL_PLUGINS)) $(DESTDIR)$(PREFIX)/lib/kernelhost/plugins/
	install -m 0644 bin/policies/*.wasm $(DESTDIR)$(PREFIX)/share/kernelhost/policies/

## release: dist/kernelhost-VERSION-OS-ARCH.tar.gz for each of
## RELEASE_PLATFORMS: static (CGO_ENABLED=0), -trimpath, stripped (-s -w),
## stamped; inside, the install layout (bin/, lib/kernelhost/plugins/,
## share/kernelhost/policies/ and share/kernelhost/deploy/)
release: policies
	@set -e; rm -rf dist; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; name=kernelhost-$(VERSION)-$$os-$$arch; d=dist/$$name; \
		echo "release $$name"; \
		for plugin in $(INSTALL_PLUGINS); do \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(RUNTIME_LDFLAGS)' \
				-o $$d/lib/kernelhost/plugins/kernelhost-transport-$$plugin ./plugins/cmd/kernelhost-transport-$$plugin; \
		done; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $$d/bin/kernelhost ./hostcmd; \
		mkdir -p $$d/share/kernelhost/policies; cp bin/policies/*.wasm $$d/share/kernelhost/policies/; \
		cp -r deploy $$d/share/kernelhost/deploy; \
		tar -C dist -czf $$d.tar.gz $$name; \
	done

## plugins: the transport plugins, bin/plugins/kernelhost-transport-*
plugins:
	$(GO) build -ldflags '$(RUNTIME_LDFLAGS)' -o bin/plugins/ ./plugins/cmd/...
	$(GO) build -o bin/plugins/ ./plugins/examples/cmd/...

## policies: the example env-var policy modules, bin/policies/*.wasm
policies:
	@$(MAKE) --no-print-directory deps-apt APT_PACKAGES=wabt
	@mkdir -p bin/policies
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o bin/policies/denylist.wasm ./plugins/policy/examples/denylist
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o bin/policies/tzdefault.wasm ./plugins/policy/examples/tzdefault
	wat2wasm plugins/policy/examples/reserved/reserved.wat -o bin/policies/reserved.wasm

## generate: the transport plugin protocol's and the sandbox API's (envd)
## Go code (needs protoc, from Debian's protobuf-compiler, and the protobuf
## well-known types it imports, from libprotobuf-dev; installed if missing)
generate:
	@$(MAKE) --no-print-directory deps-apt APT_PACKAGES="protobuf-compiler libprotobuf-dev"
	$(GO) generate ./plugins/transportplugin/proto ./hostcmd/envd/gen

## run: build and serve (settings: KERNELHOST_* env vars or ARGS)
# As root it installs the walls' packages where missing (bubblewrap, and passt
# for -context-network=isolated, the default), as make policies installs
# wabt; as another user it says what is missing.
run: build plugins
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory deps-apt APT_PACKAGES="bubblewrap passt"; fi
	@python="$$($(PICK_PYTHON))"; \
	command -v bwrap >/dev/null || echo "bwrap is missing: interpreters will NOT be sandboxed (apt-get install bubblewrap, or make deps)"; \
	command -v bwrap >/dev/null && ! command -v pasta >/dev/null && \
		echo "pasta is missing: the host refuses to start with -context-network=isolated, the default (apt-get install passt, or make run ARGS=-context-network=none for contexts without outbound network)"; \
	KERNELHOST_PYTHON="$$python" exec ./bin/kernelhost serve $(ARGS)

# The Python `make run` gives the subprocess transport: KERNELHOST_PYTHON if
# set, else python3 on PATH where it has IPython, matplotlib, pandas and PIL
# (cells then run with IPython's semantics, plots show inline, and the kernel
# environment's charts and data apply), else Debian's /usr/bin/python3 where
# it has them (python3 on PATH may be a pyenv or venv one without them), else
# python3. It prints the python on stdout and, on stderr, why that one and
# what it lacks, with the apt-get or pip line that adds it: without them the
# first plot fails with a bare ModuleNotFoundError. hostcmd/sdktest picks the
# same way (pickPython). The probe runs outside any sandbox, so with -I: not
# the user site (~/.local, which every sandbox may write: a planted
# usercustomize.py or .pth must not run here), no PYTHON* variable, not the
# cwd; a module installed only with `pip install --user` counts as missing.
PY_MODULES = IPython matplotlib pandas PIL
PY_LACKS = $$1 -I -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' $(PY_MODULES) 2>/dev/null || echo $(PY_MODULES)
PICK_PYTHON = lacks() { $(PY_LACKS); }; \
	if [ -n "$${KERNELHOST_PYTHON:-}" ]; then p="$$KERNELHOST_PYTHON"; why="KERNELHOST_PYTHON says so"; \
	else why=""; p=""; for c in python3 /usr/bin/python3; do \
		missing="$$(lacks $$c)"; \
		if [ -z "$$missing" ]; then p="$$c"; break; fi; \
		why="$$why$${why:+; }$$c ($$(command -v $$c || echo not found)) lacks $$missing"; \
	done; \
	if [ -n "$$p" ]; then why="$${why:-python3 on PATH has $(PY_MODULES)}$${why:+; $$p has them}"; else p=python3; fi; fi; \
	echo "python contexts run $$p ($$(command -v $$p || echo not found)): $$why (KERNELHOST_PYTHON chooses another)" >&2; \
	missing="$$(lacks $$p)"; \
	if [ -n "$$missing" ]; then \
		pkgs=""; pips=""; for m in $$missing; do case $$m in \
			IPython) pkgs="$$pkgs python3-ipython"; pips="$$pips ipython";; \
			PIL) pkgs="$$pkgs python3-pil"; pips="$$pips pillow";; \
			*) pkgs="$$pkgs python3-$$m"; pips="$$pips $$m";; esac; done; \
		echo "WARNING: $$p lacks $$missing: a cell that imports one fails with ModuleNotFoundError (no plots, charts or DataFrame data$$(case " $$missing " in *" IPython "*) echo "; without IPython no %magic, !cmd or display()";; esac)). Add them: apt-get install$$pkgs (then KERNELHOST_PYTHON=/usr/bin/python3), or $$p -m pip install$$pips" >&2; \
	fi; \
	echo "$$p"

## run-jupyter: serve on the Jupyter transport: starts a Jupyter Server on
## 127.0.0.1:$(JUPYTER_PORT) (own root dir, generated token, IOPub rate
## limits off, and the kernel specs of deploy/jupyter/kernels: python3 with
## unbounded IOPub queues and, where IRkernel is installed, ir, each kernel
## in a bwrap sandbox, as jupytertest does),
## waits for it, runs the host against it and stops the server when the
## host exits.
# The server runs in a session of its own (setsid): a SIGTERM or Ctrl-C to
# this process group reaches the host, which deletes its kernels on a server
# that is still up, and the trap stops the server after that. The restarter
# polls kernels 4 times a second, so a kernel's death is reported within a
# second (docs/jupyter.md). The server's Python runs isolated (-I): its
# kernels can write the user site (~/.local), and nothing they put there
# may run in the server, outside their sandboxes, at its next start. Its log
# is in its runtime dir, which kernels do not see: it holds what every
# kernel wrote to its stdout and stderr outside a cell's capture.
run-jupyter: build plugins deps-jupyter
	@set -eu; \
	rm -rf "$(JUPYTER_DIR)"; mkdir -p "$(JUPYTER_DIR)/root" "$(JUPYTER_DIR)/data" "$(JUPYTER_DIR)/runtime"; \
	mkdir -p "$(JUPYTER_DIR)/data/kernels"; cp -r deploy/jupyter/kernels/python3 "$(JUPYTER_DIR)/data/kernels/"; \
	for d in /usr/share/jupyter/kernels /usr/local/share/jupyter/kernels; do \
		[ -e "$$d/ir/kernel.json" ] && cp -r deploy/jupyter/kernels/ir "$(JUPYTER_DIR)/data/kernels/" && break; \
	done; \
	token=$$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n'); \
	root=""; [ "$$(id -u)" = 0 ] && root="--allow-root"; \
	JUPYTER_CONFIG_DIR="$(JUPYTER_DIR)/config" JUPYTER_DATA_DIR="$(JUPYTER_DIR)/data" \
	JUPYTER_RUNTIME_DIR="$(JUPYTER_DIR)/runtime" IPYTHONDIR="$(JUPYTER_DIR)/ipython" \
	PYDEVD_DISABLE_FILE_VALIDATION=1 \
	setsid /usr/bin/python3 -I -m jupyter_server --no-browser --ip=127.0.0.1 --port=$(JUPYTER_PORT) --port-retries=0 \
		--ServerApp.token="$$token" --ServerApp.root_dir="$(JUPYTER_DIR)/root" \
		--ServerApp.iopub_msg_rate_limit=0 --ServerApp.iopub_data_rate_limit=0 \
		--ServerApp.limit_rate=False --KernelRestarter.time_to_dead=0.25 $$root \
		>"$(JUPYTER_DIR)/runtime/server.log" 2>&1 & \
	server=$$!; \
	trap 'kill $$server 2>/dev/null || true; wait $$server 2>/dev/null || true' EXIT INT TERM; \
	echo "jupyter server: 127.0.0.1:$(JUPYTER_PORT), pid $$server, log $(JUPYTER_DIR)/runtime/server.log"; \
	i=0; until curl -fs -o /dev/null -H "Authorization: token $$token" http://127.0.0.1:$(JUPYTER_PORT)/api/kernelspecs; do \
		kill -0 $$server 2>/dev/null || { echo "jupyter server exited:"; cat "$(JUPYTER_DIR)/runtime/server.log"; exit 1; }; \
		i=$$((i+1)); [ $$i -le 600 ] || { echo "jupyter server not ready after 60 s"; exit 1; }; \
		sleep 0.1; \
	done; \
	KERNELHOST_TRANSPORT=jupyter KERNELHOST_JUPYTER_URL=http://127.0.0.1:$(JUPYTER_PORT)/ \
	KERNELHOST_JUPYTER_TOKEN="$$token" ./bin/kernelhost serve $(ARGS) || status=$$?; \
	exit $${status:-0}

## test: install missing test dependencies, then all tests with -race, the
## core's tests compiled for WebAssembly under wazero and the fuzz targets,
## side by side (each part's output is printed whole when it ends)
test: deps
	@$(MAKE) --no-print-directory -j4 --output-sync=target test-go test-go-faults test-wasm test-fuzz

# test runs its four parts at once: test-go and test-go-faults spend much of
# their time waiting on interpreters, kernels and servers, and the builds and
# fuzzing of the other two fill the cores meanwhile. Each part does the same
# work as alone. The other two run niced (BACKGROUND): they are CPU work
# with no time bound, so they take the cores when the tests wait and give
# them up when the tests, whose bounds and binaries are the run's length,
# need them.
BACKGROUND := nice -n 10

# -timeout: go test's default of 10 minutes is per package binary, and the
# host's and the Jupyter transport's packages run real interpreters, Jupyter
# Servers and a Kernel Gateway one after the other; on a loaded 2-core
# machine they have come within it.
# SLOW_TEST_PACKAGES come first, longest first: go test starts package
# binaries in the order it is given them (-p of them at once, one per core),
# and ./... alone would start the longest ones last, leaving one core idle
# at the end while they finish (sdktest, pluginrpc and policy, over a
# minute each, were the last 3 minutes of a CI run); the short packages fill
# in beside them.
SLOW_TEST_PACKAGES := ./transports/subprocess/ ./transports/jupyter/ ./hostcmd/server/ ./hostcmd/sdktest/ \
	./hostcmd/e2e/jupyter/ ./hostcmd/ ./plugins/transportplugin/internal/pluginrpc/ ./plugins/policy/ \
	./hostcmd/e2e/python/ ./hostcmd/e2e/sandbox/
# Most tests are parallel tests (t.Parallel): they wait on interpreters,
# kernels and servers of their own, most of the time asleep (a timeout
# played out, a kernel starting), so four run at a time per package binary
# rather than go test's default of GOMAXPROCS, two here: the slow binaries
# took 6 min instead of 8 on two cores, every test passing (docs/benchmarks.md,
# CI time).
# Tests that need their test binary to themselves (the fault suite, whose
# leak checks see the whole binary, and the flood, whose bystander has a
# latency bound) are not parallel: go test runs them first, alone, and the
# parallel ones wait for them. They are therefore in a package of their own,
# FAULT_PACKAGE, which test-go-faults runs whole as a binary beside test-go;
# test-go runs every other package. The two run every test once between them.
FAULT_PACKAGE := ./hostcmd/e2e/faults/
test-go:
	$(GO) test -race -count=1 -timeout=30m -parallel=4 $(SLOW_TEST_PACKAGES) \
		$(filter-out $(shell $(GO) list $(FAULT_PACKAGE)),$(shell $(GO) list ./...))

# A TestFault* elsewhere would run among that package's parallel tests, whose
# processes and goroutines its leak checks would count as its own.
test-go-faults:
	@if git grep -l '^func TestFault' -- '*_test.go' ':!$(FAULT_PACKAGE)'; then \
		echo "TestFault* outside $(FAULT_PACKAGE) (above): move them there (test-go-faults runs them alone)" >&2; exit 1; fi
	$(GO) test -race -count=1 -timeout=30m -parallel=4 $(FAULT_PACKAGE)

## test-faults: the fault suite (kill -9 of interpreter, plugin, Jupyter
## kernel and server; cut and stalled websocket; 500 disconnecting clients;
## a 1 byte/s reader of 100 MB) and the 10,000-execution isolation soak
## (make test runs both too). See docs/reliability.md.
test-faults: deps
	@$(MAKE) --no-print-directory run-faults FAULT_TESTS='^(TestFault|TestIsolationSoak)'

## soak: the isolation soak alone, SOAK executions (default 10000)
soak:
	@$(MAKE) --no-print-directory run-faults FAULT_TESTS='^TestIsolationSoak$$$$'

# The whole log goes to bin/faults.log; the results and figures to the terminal.
run-faults:
	@mkdir -p bin; status=0; \
	$(GO) test -race -count=1 -v -run='$(FAULT_TESTS)' $(FAULT_PACKAGE) -args -soak=$(SOAK) >bin/faults.log 2>&1 || status=$$?; \
	grep -E '^(--- |FAIL|ok|PASS)|FIGURE' bin/faults.log; \
	[ $$status = 0 ] || echo "failed: the whole log is in bin/faults.log"; exit $$status

## fuzz: each fuzz target for FUZZTIME (default 60s): make fuzz FUZZTIME=10m
## (FUZZTIME=5000x: that many executions each)
fuzz:
	@$(MAKE) --no-print-directory run-fuzz FUZZ_RUN='$(FUZZ_TARGETS)' FUZZ_FOR=$(FUZZTIME)

test-fuzz:
	@$(BACKGROUND) $(MAKE) --no-print-directory run-fuzz FUZZ_RUN='$(FUZZ_QUICK)' FUZZ_FOR=count

# One `go test -fuzz` per target of FUZZ_RUN: Go fuzzes one target per
# invocation. FUZZ_FOR=count takes each target's own execution count.
run-fuzz:
	@set -e; for t in $(FUZZ_RUN); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; count=$${rest#*:}; \
		budget=$(FUZZ_FOR); [ "$$budget" = count ] && budget=$${count}x; \
		echo "fuzz $$pkg $$name for $$budget"; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$$budget $$pkg; \
	done

test-wasm: $(WAZERO)
	GOOS=wasip1 GOARCH=wasm GOWASIRUNTIME=wazero PATH="$(TOOLS):$$PATH" \
		$(BACKGROUND) $(GO) test -count=1 -exec="$(GOROOT)/lib/wasm/go_wasip1_wasm_exec" ./core/...

$(WAZERO):
	GOBIN=$(TOOLS) $(BACKGROUND) $(GO) install github.com/tetratelabs/wazero/cmd/wazero@$(WAZERO_VERSION)

deps: deps-apt deps-npm

deps-jupyter:
	@$(MAKE) --no-print-directory deps-apt APT_PACKAGES="jupyter-server python3-ipykernel curl bubblewrap"

# Installs only the packages dpkg does not know as installed.
deps-apt:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The official SDK, pinned by package-lock.json.
deps-npm: $(SDKTEST)/node_modules/.package-lock.json

$(SDKTEST)/node_modules/.package-lock.json: $(SDKTEST)/package.json $(SDKTEST)/package-lock.json
	cd $(SDKTEST) && npm ci --no-audit --no-fund

## bench: host vs direct-kernel round trip, a 200,000-line stream, the floors (prints,
## context start and idle RSS against the bare interpreter, as ratios), and the
## python environment (a plain cell with and without it, a 10,000-point chart)
bench:
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -count=1 ./hostcmd/server/ ./hostcmd/e2e/jupyter/ ./transports/kernelpy/

## vet: gofmt check and go vet
# -race: vet compiles every package and its tests; with the flags make test
# uses, what it compiled is in the build cache for the tests (.ci/run runs
# vet first), instead of a second build of everything.
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -race ./...

clean:
	rm -rf bin dist
