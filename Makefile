# Everything a fresh machine needs is installed by these targets themselves.
#   make run    -> a local cluster: nsqlookupd + nsqd on the default ports, data under ./data
#   make check  -> lint, import contracts, types and the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The compiled core must be there (a test fails naming it otherwise); a machine without a C
# compiler runs `make check NSQPY_REQUIRE_COMPILED=0` on the pure-Python twin.
NSQPY_REQUIRE_COMPILED ?= 1
export NSQPY_REQUIRE_COMPILED

.PHONY: run check lint imports typecheck test bench clean bytecode

# The editable install also builds the compiled core in place (setup.py; Cython, a C compiler).
$(STAMP): pyproject.toml setup.py $(shell find src -name '*.pyx')
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	@# nsqadmin's browser tests drive Debian's chromium; install it where we may (CI runs as root).
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)) \
	    || echo "chromium install failed: browser tests will fail"; \
	fi
	@# one test reads nsqd.dat with Go's encoding/json, as Go nsqd v1.3.0 does; Debian's Go will do.
	@if ! command -v go >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -q golang-go >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q golang-go >/dev/null)) \
	    || echo "go install failed: the Go nsqd.dat test will be skipped"; \
	fi
	@if command -v npm >/dev/null 2>&1; then \
	  (cd tests/peers/nsqjs && npm install --silent --no-audit --no-fund) || echo "nsqjs install failed: nsqjs peer tests will be skipped"; \
	fi
	@# gnsq's own test suite, run against nsqpy by tests/upstream, ships in its sdist (the peer's version)
	@$(PY) -m pip download -q --no-binary :all: --no-deps gnsq==1.0.2 -d $(VENV)/upstream \
	  || echo "gnsq sdist download failed: gnsq's own test suite will be skipped"
	touch $(STAMP)

# Compiled bytecode for src/ even where PYTHONDONTWRITEBYTECODE is set: without it every daemon
# start compiles nsqpy anew (~60 ms of nsqd's ~190 ms to its first /ping; see bench_startup).
bytecode: $(STAMP)
	$(PY) -m compileall -q src

run: $(STAMP) bytecode
	$(VENV)/bin/nsqpy-cluster --data-path=data/nsqd

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# The layers and acyclic packages of ARCHITECTURE.md ([tool.importlinter] in pyproject.toml).
imports: $(STAMP)
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) bytecode
	$(PY) -m pytest
	@# again on the pure-Python twin of the compiled core: protocol, domain and socket tests
	NSQPY_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider tests/protocol tests/nsqd

check: lint imports typecheck test

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
