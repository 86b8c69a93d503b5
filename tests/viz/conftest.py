"""Fixtures for the visualiser's tests: a recorded trace (helpers for pilots are in pilot.py).

`data/capital.jsonl` is a real trace (`nanospec generate --method draft --prompt "The capital of
France is" --gamma 4 --temperature 1 --seed 29 --max-new-tokens 24 --trace ...`, schema 2) from
the shipped models, kept in the repo so replay tests and snapshots need no JAX and never change
with numerics: round 1 accepts ' Par', 'is', '.' and rejects x₄ (<|endoftext|>, q 0.007), then
↻ ' France' (residual 0.69, p 0.35, q 0.13); round 2 rejects x₁ ' borders' (three discarded ·)
and ↻ ' uses'; round 3 accepts all four (★ ' currency'); round 4 accepts all four but is cut
short by <|endoftext|> after x₂. `data/capital-schema1.jsonl` is an older schema 1 trace (its
resample events carry only the residual's probability, named p), kept to test the upgrade.

`data/capital-ssd.jsonl` is a real speculative speculative decoding trace from the same models
(`nanospec generate --method ssd --prompt "The capital of France is" --temperature 1 --seed 2
--max-new-tokens 24 --fanout 2 --trace ...`; T = 1 and fan-out 2 because greedy runs hit the
cache every round, and a test needs misses too): 9 rounds, each caching 10 branches (two t* for
each k = 0..4). Round 1 has no cache (◇) and ends (0, ' Par'), which it cached, so round 2 hits
◆; rounds 2–4 and 8–9 hit, rounds 5–7 miss: round 4 ends (1, ' continent'), not among its
k = 1 guesses, and round 5 ends (3, ' is'), not ' France' or ' Hungary'. Round 9 is the last.
"""

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
TRACE = DATA / "capital.jsonl"
SCHEMA1 = DATA / "capital-schema1.jsonl"
SSD_TRACE = DATA / "capital-ssd.jsonl"


@pytest.fixture
def trace_path() -> Path:
    return TRACE


@pytest.fixture
def recording():
    from viz.rounds import load_recording

    return load_recording(TRACE)


@pytest.fixture
def ssd_recording():
    from viz.rounds import load_recording

    return load_recording(SSD_TRACE)
