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

# Three workers on the two cores of the development machine class: many tests wait on sockets
# and subprocesses, so a third worker fills the waits (pytest-xdist; 3 min 50 s there, against
# 5 min 18 s with two and 3 min 51 s with four, which only burn more CPU).
# The sources are compiled first: where PYTHONDONTWRITEBYTECODE is set (CI images), every `probe`
# a test starts would otherwise compile them again (0.1-0.2 s of CPU each).
test: $(STAMP) lint
	$(BIN)/python -m compileall -q src
	$(BIN)/python -m pytest -n 3

# Offline end to end: starts the SIMULATED demo model in-process, runs the example probe set
# under both example prompts, prints the report and the comparison, and stops the server.
demo: $(STAMP)
	$(BIN)/probe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
