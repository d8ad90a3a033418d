# Herald: `make run` serves on 127.0.0.1:8080 with ./data; `make test` runs every test.
SWIFT ?= swift
APT_PACKAGES := libmicrohttpd-dev libsqlite3-dev pkg-config
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps test-deps build run test lint format openapi-lint release bench bench-healthz bench-sse bench-replicas bench-fair bench-callgrind layout pgo callgrind-deps bench-webhooks verify-container clean \
	reliability reliability-deps fuzz

## Installs the C libraries Herald links against, when missing (Debian/Ubuntu).
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build --product herald

## Serves on 127.0.0.1:8080 with the SQLite file and media under ./data.
run: build
	$(SWIFT) run --skip-build herald serve

## The S3 tests start moto's S3 server (pip package moto[server]); the webhook tests check signatures with the
## official standardwebhooks package; the tracing tests decode OTLP with opentelemetry-proto; the resumable upload tests
## upload with tuspy, the tus project's Python client; the client tests drive `herald publish` in tmux and the dashboard in headless
## Chromium through Selenium; the PostgreSQL backend's tests start a PostgreSQL 15 server of their own (Debian's
## postgresql package) on a temporary directory and a loopback port. Installed here when missing.
TEST_APT_PACKAGES := tmux chromium chromium-driver postgresql
test-deps: deps
	@missing=""; for p in $(TEST_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@python3 -c "import moto.server, flask, standardwebhooks, selenium, opentelemetry.proto, tusclient" 2>/dev/null || { \
		python3 -m pip --version >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-pip; }; \
		echo "installing: moto[server] standardwebhooks selenium opentelemetry-proto tuspy"; \
		python3 -m pip install -q --disable-pip-version-check "moto[server]" standardwebhooks selenium opentelemetry-proto tuspy 2>/dev/null \
			|| python3 -m pip install -q --disable-pip-version-check --break-system-packages "moto[server]" standardwebhooks selenium opentelemetry-proto tuspy; }

test: test-deps
	$(SWIFT) test

lint:
	$(SWIFT) format lint --strict --recursive Package.swift Sources Tests Plugins

format:
	$(SWIFT) format --in-place --recursive Package.swift Sources Tests Plugins

## Checks openapi.yaml against the OpenAPI 3.1 schema (needs: pip install openapi-spec-validator).
openapi-lint:
	openapi-spec-validator openapi.yaml

## The release build, every Swift module of it (the dependencies' too: a package's unsafe flags reach its own targets
## only) optimized with LLVM's IR profile of a load, Sources/herald/herald.profdata (make pgo takes it again): about 7%
## more status polls a second on this machine (BENCHMARKS.md). A function changed since the profile was taken gets no
## counts and is compiled as without one: a stale profile costs speed, never correctness. The Dockerfile runs this.
## The frontend would keep an object file whose IR before LLVM's passes has not changed, optimized with an older profile
## or none: told not to, it runs LLVM whenever SwiftPM compiles a module (make pgo touches every source for that).
PROFILE_FLAGS := -Xswiftc -Xfrontend -Xswiftc -ir-profile-use=$(CURDIR)/Sources/herald/herald.profdata \
	-Xswiftc -Xfrontend -Xswiftc -disable-incremental-llvm-codegen
release: deps
	$(SWIFT) build -c release --product herald --static-swift-stdlib --scratch-path .build-release $(PROFILE_FLAGS)

## Release builds, then every measurement side by side (Benchmarks/run.py); writes BENCHMARKS.md (about 20 minutes
## warm: the status poll at both log levels, post creation, parallel publish, cancellation, memory, 1 GiB ingest on
## disk and tmpfs, the publish path with its fsyncs counted under strace, the image through make verify-container's
## script, which rebuilds the Swift layer after a source change: 12 minutes more; 1 GiB through tus beside one
## POST /v1/media); then Herald on PostgreSQL beside SQLite (make bench-replicas), fair share (make bench-fair) and the
## instructions of a poll (make bench-callgrind).
## One part of the first: BENCH_ARGS="--only publish".
bench: deps
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk; }
	@command -v curl >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq curl; }
	@command -v strace >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq strace; }
	@dpkg -s libssl-dev >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq libssl-dev; }
	python3 Benchmarks/run.py $(BENCH_ARGS)
	$(MAKE) bench-replicas BENCH_ARGS=
	$(MAKE) bench-fair BENCH_ARGS=
	$(MAKE) bench-callgrind BENCH_ARGS=

## GET /healthz under wrk, side by side with a plain C libmicrohttpd server.
bench-healthz: deps
	Benchmarks/healthz.sh

## 1,000 idle Server-Sent Events streams (RSS, CPU) and the fan-out latency of a change to 100 of them (release build).
bench-sse: release
	python3 Benchmarks/sse.py

## Herald on PostgreSQL beside Herald on SQLite (release build; a durable PostgreSQL 15 of its own): the status poll, the
## publish path, a 10,000-job claim backlog over three replicas, the cancel and the change-to-event latencies across
## replicas (Benchmarks/replicas.py; about 6 minutes warm).
bench-replicas: release
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk; }
	@dpkg -s postgresql >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql; }
	python3 Benchmarks/replicas.py $(BENCH_ARGS)

## Fair share between tenants: claim throughput over 100 tenants, B's wait behind A's backlog, on SQLite and PostgreSQL
## (release build; BENCH_ARGS="--baseline BIN" measures another build beside it).
bench-fair: release
	@dpkg -s postgresql >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql; }
	python3 Benchmarks/fairshare.py $(BENCH_ARGS)

## Instructions a status poll, split by who spends them (Herald's code, the Swift runtime, SQLite, libmicrohttpd,
## libc), for Herald and the C servers, counted by valgrind's callgrind (Benchmarks/callgrind.py; about 3 minutes).
bench-callgrind: release callgrind-deps
	python3 Benchmarks/callgrind.py --skip-swift-build $(BENCH_ARGS)

## Rewrites Sources/herald/hot-functions.txt, the order release builds link the status poll's functions in, from a
## callgrind run of the polls (make bench-callgrind's), after a change to the poll's path; then links the release
## binary again (SwiftPM does not know the list is an input of the link: the binary is removed so that it relinks).
layout: release callgrind-deps
	python3 Benchmarks/callgrind.py --skip-swift-build --layout Sources/herald/hot-functions.txt $(BENCH_ARGS)
	rm -f .build-release/release/herald
	$(MAKE) release

## Rewrites Sources/herald/herald.profdata, the profile release builds are optimized with, from an instrumented build
## under a load of uploads, publishes and status polls (Benchmarks/pgo.py, PGO_ARGS="--seconds N"; about 25 minutes
## cold); then compiles every module of the release build again with it (SwiftPM does not know the profile is an input:
## every Swift source of it is touched) and lays the poll's functions out again (make layout), since the profile moves code.
pgo: deps
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk; }
	python3 Benchmarks/pgo.py $(PGO_ARGS)
	find Sources .build-release/checkouts -name '*.swift' ! -name 'Package*.swift' -exec touch {} + 2>/dev/null || true
	$(MAKE) layout

## valgrind, and OpenSSL's headers for the C status server.
callgrind-deps:
	@command -v valgrind >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq valgrind; }
	@dpkg -s libssl-dev >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq libssl-dev; }

## Webhook deliveries a second to a local nginx that answers 204: a backlog, then live job endings (release build).
bench-webhooks: release
	@command -v wrk >/dev/null && command -v nginx >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk nginx-light; }
	python3 Benchmarks/webhooks.py

## The reliability battery (Reliability/run.py), bounded, one part after another: the crash loop (N rounds of SIGKILL
## under load; N=200 for the soak), Schemathesis over openapi.yaml, the test suites under TSan and ASan, every libFuzzer
## target for FUZZ_SECONDS, abuse from the network, SIGTERM under load. Writes RELIABILITY.md. About 60 minutes cold
## (each sanitizer build compiles NIO and BoringSSL again), 15 warm.
N ?= 20
FUZZ_SECONDS ?= 60
reliability: release reliability-deps
	Fuzz/run.sh build
	python3 Reliability/run.py --rounds $(N) --fuzz-seconds $(FUZZ_SECONDS) $(RELIABILITY_ARGS)

## Schemathesis (pinned: its hooks read its failure reports), with what make test needs.
reliability-deps: test-deps
	@python3 -c "import schemathesis" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check "schemathesis==4.32.5" \
		|| python3 -m pip install -q --disable-pip-version-check --break-system-packages "schemathesis==4.32.5"

## Builds the libFuzzer targets (Fuzz/, a package of its own) and runs each for FUZZ_SECONDS.
fuzz: deps
	Fuzz/run.sh build
	Fuzz/run.sh fuzz $(FUZZ_SECONDS)

## Builds the Dockerfile with buildah, runs it with podman, publishes a post through it, restarts it, then runs it on a
## PostgreSQL of its own with HERALD_DATABASE_URL (root needed).
verify-container:
	@dpkg -s postgresql >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql; }
	scripts/verify-container

clean:
	rm -rf .build .build-release .build-tsan .build-asan Fuzz/.build-fuzz Benchmarks/out Reliability/out Benchmarks/hummingbird-baseline/.build-release
