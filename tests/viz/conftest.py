"""Fixtures for the visualiser's tests: a recorded trace (helpers for pilots are in pilot.py).

`data/capital.jsonl` is a real trace (`nanospec generate --method draft --trace`, T = 1, γ = 4,
seed 1) from two small trained models, kept in the repo so replay tests and snapshots need no
JAX and never change with numerics: round 1 rejects at x₂ (↻), round 2 at x₁, round 3 accepts
all four (★), round 4 rejects x₄, round 5 accepts all four but is cut short by <|endoftext|>.
"""

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
TRACE = DATA / "capital.jsonl"


@pytest.fixture
def trace_path() -> Path:
    return TRACE


@pytest.fixture
def recording():
    from viz.rounds import load_recording
    return load_recording(TRACE)
