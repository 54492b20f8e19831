# netattach: `make demo` runs the demo, `make test` runs every check. Both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: deps venv test lint typecheck layers pytest demo bench-runtime bench bench-memory clean shim

deps:
	@scripts/install-deps.sh

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,build]'
	@touch $(STAMP)

venv: deps $(STAMP)

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: venv
	$(BIN)/mypy

layers: venv
	$(BIN)/lint-imports

pytest: venv
	$(BIN)/python -m pytest --req-report $(PYTEST_ARGS)

test: lint typecheck layers pytest

demo: venv
	$(BIN)/netattach demo

bench-runtime: venv
	$(BIN)/python -m bench.runtime_latency

bench: venv shim
	$(BIN)/python -m bench.pod_latency

# The daemon's memory on the Kubernetes feed, idle and with 5,000 pods + 1,000 NADs cached (root).
bench-memory: venv
	$(BIN)/python -m bench.daemon_memory

# The shim's self-contained executable dist/netattach-shim/netattach-shim (and the zipapp beside it).
shim: venv
	@$(BIN)/python -c 'import nuitka, PyInstaller' 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[build]'
	PYTHON=$(BIN)/python scripts/build-shim.sh executable dist
	PYTHON=$(BIN)/python scripts/build-shim.sh zipapp dist/netattach-shim.pyz

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
