# pgrag-dag — every set-up step a fresh machine needs is here.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 3000
# demo, ui, stop and test work on the demo's configuration (this repository's pgrag.yaml and its .pgrag/),
# whatever PGRAG_CONFIG the shell exports for a project of the user's (`export PGRAG_CONFIG=…` of "Your own
# documents"): that variable is replaced for demo/ui/stop and removed for the tests, which set their own
DEMO_ENV := PGRAG_CONFIG=$(CURDIR)/pgrag.yaml LITELLM_LOCAL_MODEL_COST_MAP=True
TEST_ENV := env -u PGRAG_CONFIG LITELLM_LOCAL_MODEL_COST_MAP=True

.PHONY: install demo test test-slow test-all test-scale lint format ui bench stop clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,celery,lint]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(DEMO_ENV) $(BIN)/pgrag demo

# every test but the slow end-to-end ones (marked `slow`: kill -9 recovery, the demo through Dagster, the daemon
# loop, parallel backfills, Celery, external PostgreSQL, …), which `make test-slow` runs; CI runs both
# on two workers (pytest-xdist), each with its own embedded PostgreSQL: the tests wait on Dagster subprocesses
# and on the server as much as they compute, so two cores finish them in less time than one worker
test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not slow" -n 2

test-slow: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m slow

test-all: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q

# the scale-out tests alone (also in `make test-slow`): external PostgreSQL over TCP, steps on Celery workers, the
# daemon loop, parallel backfills and the multiprocess executor
test-scale: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -s tests/e2e/test_external_pg.py tests/e2e/test_celery.py \
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

# the Dagster UI on the demo's instance; `make ui PORT=3001` when 3000 is taken
ui: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(DEMO_ENV) $(BIN)/pgrag ui --port $(PORT)

bench: $(STAMP)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(BIN)/python evaluation/bench_index.py

# not installed, nothing of ours can be running: say so rather than install to stop nothing
stop:
	@if [ -x $(BIN)/pgrag ]; then $(DEMO_ENV) $(BIN)/pgrag stop-db; else echo "not installed: no database to stop"; fi

clean: stop
	rm -rf .pgrag
