# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install services lint typecheck imports unit integration bench-quick clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

services:
	./scripts/ensure-services.sh
	./scripts/ensure-mlflow.sh

## Start the whole system locally: sim clusters with Argo, every deployable, a stream of runs.
demo: install services
	$(BIN)/python scripts/demo.py

## Lint, types, import contracts, then every test against the real services.
test: install services lint typecheck imports
	$(BIN)/pytest -q -p no:cacheprovider tests

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

imports:
	$(BIN)/lint-imports

unit: install
	$(BIN)/pytest -q tests/unit

integration: install services
	$(BIN)/pytest -q tests/integration

bench-quick: install services
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .run
