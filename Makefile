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

# Four workers on the two cores of the development machine class, each taking work from the
# others when its own runs out (pytest-xdist's worksteal): many tests wait on sockets and
# subprocesses, so the extra workers fill the waits (3 min 22-28 s there, against 4 min 12 s with
# three and the default scheduling, and 3 min 58 s with six, which only burn more CPU).
test: $(STAMP) lint
	$(BIN)/python -m compileall -q src
	$(BIN)/python -m pytest -n 4 --dist worksteal

# Offline end to end: starts the SIMULATED demo model in-process, runs the example probe set
# under both example prompts, prints the report and the comparison, and stops the server.
demo: $(STAMP)
	$(BIN)/probe demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
