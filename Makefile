# The two commands of the README: `make demo` runs the main job, `make test` runs every test.
# Each creates .venv and installs the project into it on first use (and when pyproject changes).
# The first Python >= 3.11 on the PATH (macOS ships 3.9, Ubuntu 22.04 3.10); or make PYTHON=...
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3 python; do \
            $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
            && { echo $$p; break; }; done)
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast lessons figures bench eval retrain clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "nanospec needs Python 3.11 or newer, and $(if $(PYTHON),$(PYTHON) is older or missing,none is on the PATH): install one (python.org, 'brew install python@3.12', 'apt install python3.12') and run make PYTHON=/path/to/python3.12."; exit 2; }
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

# One SVG per key idea of the course, for slides, into runs/figures/ (nanospec/slides.py).
figures: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[figures]'
	$(BIN)/python -m nanospec.slides --out runs/figures

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
