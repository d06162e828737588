# Two entry points on a fresh checkout: `make demo` and `make test`.
# Each creates .venv on first use and installs the project into it.

PYTHON ?= python3
# Test processes (pytest-xdist); 0 runs the suite in this one. Two take 9-10 min on 2 cores against
# 16.5: most tests wait on a server, a database or a browser. Each file's tests stay in one process
# (tests/conftest.py), so a module's fixtures are built once and its later tests see its earlier ones.
TEST_WORKERS ?= 2
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Test-only TimescaleDB (PGlite build, tests/timescale); its tests skip without it, except in CI.
PGLITE := tests/timescale/node_modules/.package-lock.json

# mypy and import-linter find modules by folder: this tree of links shows them the installed names
# (gpuscope.exporter is the exporter/ folder, and so on; pyproject.toml maps them the same way).
IMPORTABLE := build/importable

.PHONY: demo test lint importable clean

demo: $(STAMP)
	@$(BIN)/python -m gpuscope.preflight postgres
	$(BIN)/gpuscope demo

test: lint $(PGLITE)
	@$(BIN)/python -m gpuscope.preflight postgres
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

lint: $(STAMP) importable
	$(BIN)/ruff check .
	$(BIN)/mypy
	cd $(IMPORTABLE) && $(CURDIR)/$(BIN)/lint-imports --config $(CURDIR)/pyproject.toml

importable:
	@rm -rf $(IMPORTABLE) && mkdir -p $(IMPORTABLE)/gpuscope
	@for f in gpuscope/*.py gpuscope/*/; do ln -s "$(CURDIR)/$${f%/}" $(IMPORTABLE)/gpuscope/; done
	@for p in exporter collector alerts stragglers health reports dashboard; do ln -s "$(CURDIR)/$$p" $(IMPORTABLE)/gpuscope/$$p; done

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "gpuscope needs Python >= 3.11 (found: $$($(PYTHON) --version 2>&1)). Set PYTHON=/path/to/python3.11." >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || \
		{ echo "Could not create $(VENV): on Debian/Ubuntu run 'apt-get install python3-venv'." >&2; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(PGLITE): tests/timescale/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/timescale --no-audit --no-fund --loglevel=error; \
	else \
		echo "npm not found: the TimescaleDB layout tests will be skipped (apt-get install nodejs npm to run them)"; \
	fi

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache test-artifacts tests/timescale/node_modules
