# Gridlane. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
# The suite runs on PostgreSQL (the embedded SQLite default has its own end-to-end smoke test).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gridlane
PYTEST_ARGS ?=

.PHONY: help run test lint fmt bench migrations clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml portal/dashboards/vendor/package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@# plotly.js's basic bundle for the dashboards (a quarter of the full one); without npm the full one serves.
	@if command -v npm >/dev/null; then npm ci --prefix portal/dashboards/vendor --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: dashboards serve plotly's full bundle (slower to draw); install npm, then make again"; fi
	touch $@

run: $(VENV)/.installed ## Install, migrate, seed the demo, serve on 127.0.0.1:$PORT with the worker (Ctrl-C stops)
	GRIDLANE_DEMO=1 $(PY) manage.py migrate --no-input
	GRIDLANE_DEMO=1 $(PY) manage.py seed_demo
	GRIDLANE_DEMO=1 $(PY) manage.py run_portal --port $(PORT)

test: $(VENV)/.installed ## Install what the tests need, start the test services, run the whole suite
	DATABASE_URL=$(TEST_DATABASE_URL) tests/services/run.sh $(VENV)/bin/pytest -n 2 --durations=25 $(PYTEST_ARGS)

bench: $(VENV)/.installed ## Benchmarks: Gridlane against its baselines side by side, printed as ratios (BENCH=name to pick)
	DATABASE_URL=$(TEST_DATABASE_URL) tests/services/run.sh $(PY) -m bench $(BENCH)

lint: $(VENV)/.installed ## ruff, mypy, the import layers (lint-imports) and a check that migrations are up to date
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run

fmt: $(VENV)/.installed ## Format and fix what ruff can
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

migrations: $(VENV)/.installed ## Write migrations for model changes
	$(PY) manage.py makemigrations

clean: ## Remove the virtual environment and local state (var/)
	rm -rf $(VENV) var
