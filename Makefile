# The two commands of the README: `make demo` runs the main job, `make test` runs every test.
# Each creates .venv and installs the project into it on first use (and when pyproject changes).
# The first Python >= 3.11 on the PATH (macOS ships 3.9, Ubuntu 22.04 3.10); or make PYTHON=...
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3 python; do \
            $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
            && { echo $$p; break; }; done)
VENV   := .venv
BIN    := $(VENV)/bin
# Every install takes the versions CI tested (constraints.txt). With WHEELHOUSE=folder (made by
# `make wheelhouse`), it takes them from that folder only: no index, no network.
PIP    := $(BIN)/python -m pip install --quiet -c constraints.txt \
          $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE))
EXTRAS := test,notebook,web,figures

.PHONY: demo intel-mac test test-all test-fast lessons figures bench eval retrain wheelhouse constraints clean

NEED_PYTHON = @$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "nanospec needs Python 3.11 or newer, and $(if $(PYTHON),$(PYTHON) is older or missing,none is on the PATH): install one (python.org, 'brew install python@3.12', 'apt install python3.12') and run make PYTHON=/path/to/python3.12."; exit 2; }

# .venv/.installed: the project with the test extra, all that `make test` needs; .venv/.workshop
# (`make workshop`): with the workshop extra instead, what a participant runs and no test tools.
$(VENV)/.installed $(VENV)/.workshop: pyproject.toml constraints.txt
	$(NEED_PYTHON)
	$(if $(WHEELHOUSE),@$(PYTHON) -m nanospec.wheelhouse check $(WHEELHOUSE))
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip setuptools
	$(PIP) -e '.[$(if $(filter %/.workshop,$@),workshop,test)]'
	touch $@

# Intel Macs (docs/install.md, "Intel Macs"): no jaxlib newer than 0.4.38 is built for them, so
# they get .venv-intel-mac, with the versions of constraints-intel-mac.txt: nanospec, the
# lessons' figures and notebooks, and pytest for the tests that check those pins. On Linux it
# builds the same venv, which tests/test_intel_mac.py runs tests in: CI tests the pins too.
INTEL_MAC := .venv-intel-mac

intel-mac: $(INTEL_MAC)/.installed

$(INTEL_MAC)/.installed: pyproject.toml constraints-intel-mac.txt
	$(NEED_PYTHON)
	$(PYTHON) -m venv $(INTEL_MAC)
	$(INTEL_MAC)/bin/python -m pip install --quiet -c constraints-intel-mac.txt --upgrade pip setuptools
	$(INTEL_MAC)/bin/python -m pip install --quiet -c constraints-intel-mac.txt \
	  -e '.[lessons,figures,notebook]' pytest pytest-xdist hypothesis
	touch $@

# The install that the targets a participant runs need: .venv/.installed, or .venv/.workshop
# where only that one is there (so `make workshop`, then `make demo`, installs nothing more).
INSTALLED := $(or $(if $(wildcard $(VENV)/.installed),,$(wildcard $(VENV)/.workshop)),$(VENV)/.installed)

demo: $(INSTALLED)
	$(BIN)/nanospec demo

# Every test, the large-N statistical runs included (this is what CI runs), less the repeated
# cases of sweeps (`make test-all` below), on one worker process more than the machine has
# cores, at most four (pytest-xdist; on 2 cores, three): while one waits on a subprocess (a
# server, a lesson's kernel, a CLI), another runs — a warm run here took 11:28 with three,
# 12:03 with two. `--dist worksteal`: a worker that runs out takes half of another's queue,
# where the default hands each worker its first 150 tests up front and one could end with
# minutes of them while the other sat idle (docs/results.md).
# Every process of the run shares one compilation cache, runs/test-xla/<versions' key>
# (tests/conftest.py): a program is compiled once per run, and a second run starts warm.
# The run ends with where its time goes (the aim: 25 minutes cold on 2 cores; the latest runs
# are in docs/results.md): the slowest tests (--durations=25), the tests that spent most
# compiling, and the run's compiling in all.
# ruff first, in a second: the code is as `ruff format` writes it, and passes pyproject.toml's
# rules (imports sorted and used, no syntax slips).
WORKERS = $(shell $(BIN)/python -c 'import os; print(min(4, (os.cpu_count() or 1) + 1))')

test: $(VENV)/.installed
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -m "not repeat" -q -n $(WORKERS) --dist worksteal --durations=25

# Everything `make test` runs, and the sweeps' repeated cases besides (the `repeat` marker: the
# other γ of a greedy sweep, the other tree shapes): docs/design.md lists each and why it is a
# repeat. Run it before landing a change to the core.
test-all: $(VENV)/.installed
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -m "repeat or not repeat" -q -n $(WORKERS) --dist worksteal --durations=25

# The fast layer only, for the edit-test loop.
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not slow and not repeat" -q

# $(call extra,NAME,MODULES): install the extra NAME only if one of its MODULES is not found.
# `make` installs the test extra, which brings figures' and web's: so `make figures`, `make
# lessons FIGURES=1` and `make notebook` never reach for the index once they are there (a room
# without network), and a first `make notebook` takes JupyterLab from WHEELHOUSE if given.
extra = $(BIN)/python -c 'import importlib.util as u, sys; \
          sys.exit(not all(map(u.find_spec, sys.argv[1:])))' $(2) || $(PIP) -e '.[$(1)]'

# Every lesson in order, as a learner runs it, with how long each took (FIGURES=1: also write
# the figures to runs/lessons/, which needs the optional matplotlib extra).
lessons: $(INSTALLED)
	$(if $(FIGURES),$(call extra,figures,matplotlib))
	$(BIN)/python -m nanospec.teach $(if $(FIGURES),--figures)

# One SVG per key idea of the course, for slides, into runs/figures/ (nanospec/slides.py).
figures: $(INSTALLED)
	$(call extra,figures,matplotlib)
	$(BIN)/python -m nanospec.slides --out runs/figures

# The lighter install for a workshop's participants (lessons/WORKSHOP.md, "Before the day"): the
# lessons, exercises, demo (--web too), notebooks and figures, and none of the test tools
# (pytest, playwright, schemathesis, ...): docs/install.md has what it saves.
.PHONY: workshop
workshop: $(VENV)/.workshop

# The lessons as notebooks: JupyterLab (the notebook extra, installed if it is not there yet;
# the workshop install has it), where a lesson opens with Open With → Notebook (jupytext reads
# lessons/NN_….py as one).
.PHONY: notebook
notebook: $(INSTALLED)
	$(call extra,notebook,jupyterlab jupytext)
	$(BIN)/python -m jupyterlab

bench: $(INSTALLED)
	$(BIN)/nanospec bench --json bench-facts-greedy.json

eval: $(INSTALLED)
	$(BIN)/nanospec eval

# Rebuild every shipped checkpoint from scratch (about an hour on a 2-core CPU).
retrain: $(INSTALLED)
	$(BIN)/nanospec train tokenizer
	$(BIN)/nanospec train target --no-resume
	$(BIN)/nanospec train draft --no-resume
	$(BIN)/nanospec train heads

# Every wheel an install needs, the build backend (setuptools) and pip included, into
# wheelhouse/, for a room without network: copy the repo with it, then `make WHEELHOUSE=wheelhouse
# test` (or demo, lessons). The wheels are for this machine's platform and Python: run it once
# on each kind of laptop in the room, into the same folder, with the room's one Python
# (lessons/WORKSHOP.md, "Before the day"; docs/install.md). wheelhouse/PLATFORMS.txt lists the
# laptops it fits, and an install from it on any other refuses before making the venv
# (nanospec/wheelhouse.py).
wheelhouse: $(INSTALLED)
	$(BIN)/python -m pip download --quiet -c constraints.txt -d wheelhouse \
	  pip setuptools '.[$(EXTRAS)]'
	@$(BIN)/python -m nanospec.wheelhouse record wheelhouse

# Re-pin constraints.txt to the newest releases: every extra into a fresh venv, then its versions.
# Run `make test` on the result before committing it: the file means "what CI tested". The
# lines marked "only on" (what Windows or macOS install and Linux never does) stay as they are:
# this venv cannot see them.
constraints:
	rm -rf .venv-pin && $(PYTHON) -m venv .venv-pin
	.venv-pin/bin/python -m pip install --quiet --upgrade pip setuptools
	.venv-pin/bin/python -m pip install --quiet '.[$(EXTRAS)]'
	{ sed -n '/^#/p' constraints.txt; { .venv-pin/bin/python -m pip freeze --all --exclude nanospec; \
	  grep ' # only on ' constraints.txt; } | .venv-pin/bin/python -c \
	  'import sys; print(*sorted(sys.stdin, key=str.lower), sep="", end="")'; } \
	  > constraints.txt.tmp && mv constraints.txt.tmp constraints.txt && rm -rf .venv-pin

clean:
	rm -rf $(VENV) $(INTEL_MAC) runs .pytest_cache
