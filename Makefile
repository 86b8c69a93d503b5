# The two commands of the README: `make demo` runs the main job, `make test` runs every test.
# Each creates .venv and installs the project into it on first use (and when pyproject changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast lessons bench eval retrain clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/nanospec demo

# Everything, the large-N statistical runs included (this is what CI runs), on up to four
# worker processes (pytest-xdist): XLA compiles on one core, so two workers nearly halve it.
# --durations=25 ends the run with the slowest tests: where the 30-minute budget goes.
test: $(VENV)/.installed
	$(BIN)/python -m pytest -m "slow or not slow" -q -n auto --maxprocesses 4 --durations=25

# The fast layer only, for the edit-test loop.
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow" -q

# Every lesson in order, as a learner runs it, with how long each took (FIGURES=1: also write
# the figures to runs/lessons/, which needs the optional matplotlib extra).
lessons: $(VENV)/.installed
	$(if $(FIGURES),$(BIN)/python -m pip install --quiet -e '.[figures]')
	$(BIN)/python -m nanospec.teach $(if $(FIGURES),--figures)

bench: $(VENV)/.installed
	$(BIN)/nanospec bench --json bench-facts-greedy.json

eval: $(VENV)/.installed
	$(BIN)/nanospec eval

# Rebuild every shipped checkpoint from scratch (about an hour on a 2-core CPU).
retrain: $(VENV)/.installed
	$(BIN)/nanospec train tokenizer
	$(BIN)/nanospec train target --no-resume
	$(BIN)/nanospec train draft --no-resume
	$(BIN)/nanospec train heads

clean:
	rm -rf $(VENV) runs .pytest_cache
