# pgrag-dag — every set-up step a fresh machine needs is here.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-slow test-all test-scale lint format ui bench stop clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,celery,lint]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/pgrag demo

# every test but the slow end-to-end ones (marked `slow`: kill -9 recovery, the demo through Dagster, the daemon
# loop, parallel backfills, Celery, external PostgreSQL, …), which `make test-slow` runs; CI runs both
test: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python -m pytest -q -m slow

test-all: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python -m pytest -q

# the scale-out tests alone (also in `make test-slow`): external PostgreSQL over TCP, steps on Celery workers, the
# daemon loop, parallel backfills and the multiprocess executor
test-scale: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python -m pytest -q -s tests/e2e/test_external_pg.py tests/e2e/test_celery.py \
		tests/e2e/test_daemon_loop.py tests/e2e/test_parallel_backfill.py

# the gates (CI runs them before the tests): formatting, lint rules, types, the layer contract
LINTED := pgrag_dag assets resources tests evaluation corpus
lint: $(STAMP)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

ui: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/pgrag ui --port 3000

bench: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python evaluation/bench_index.py

stop: $(STAMP)
	$(BIN)/pgrag stop-db

clean: stop
	rm -rf .pgrag
