# `make test` and `make demo` are the two commands of the README.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# Two workers on the two cores of the development machine class: most tests wait on sockets and
# subprocesses, so the suite takes about half the time (pytest-xdist).
test: $(STAMP) lint
	$(BIN)/python -m pytest -n 2

# Offline end to end: starts the SIMULATED demo model in-process, runs the example probe set
# under both example prompts, prints the report and the comparison, and stops the server.
demo: $(STAMP)
	$(BIN)/probe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
