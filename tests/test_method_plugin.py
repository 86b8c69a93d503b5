"""A new method is one module and one table entry: tests/repeat_drafter.py plus a `Method`.

Nothing else in nanospec is touched: the entry alone makes the drafter a `--method` of the
command line, a method `decode` runs (fused and step by step), and a loop the statistical
check accepts. The joint-law check: N = 20,000 runs, γ = 3, T = 0.7 with top-k 3 and top-p
0.9 on the tiny pair of tests/statistical/laws.py; threshold p-value > 1e-4 (false failure
1e-4, fixed seed).
"""

import json

import pytest

from nanospec import methods
from nanospec.decode import Bundle, decode
from nanospec.methods import Method
from nanospec.sampling import SamplingParams
from tests.conftest import SHIPPED
from tests.repeat_drafter import RepeatLast

ENTRY = Method("repeat", "guess that the last token repeats", (), "tests.repeat_drafter:RepeatLast")


@pytest.fixture
def registered(monkeypatch):
    """The one line a new method adds to methods.py, added for this test only (the command
    line reads the table when it builds its parser, so it sees the entry too)."""
    monkeypatch.setitem(methods.METHODS, ENTRY.name, ENTRY)


def test_the_entry_makes_it_a_method_decode_runs_exactly(registered):
    bundle = Bundle.load(SHIPPED, ("target",))
    prompt = "Paris, Paris, Paris, Paris"
    run = dict(temperature=0.0, max_new=24, ignore_eos=True)
    ar = decode(bundle, prompt, method="ar", **run)
    fused = decode(bundle, prompt, method="repeat", gamma=3, **run)
    stepped = decode(bundle, prompt, method="repeat", gamma=3, with_events=True, **run)
    assert fused.tokens == ar.tokens == stepped.tokens  # greedy: the target's own text
    assert "acceptance_rate" in fused.stats  # it ran as a speculative method, with drafts
    assert any(e["type"] == "draft" for e in stepped.events)


def test_the_entry_makes_it_a_command_line_method(registered, capsys):
    from nanospec.cli import main

    code = main(
        [
            "generate",
            "--prompt",
            "ha ha ha ha",
            "--method",
            "repeat",
            "--json",
            "--temperature",
            "0",
            "--max-new-tokens",
            "8",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["tokens"]) <= 8 and "acceptance_rate" in out["stats"]


def test_the_plug_in_keeps_the_joint_law():
    from tests.statistical.laws import tiny_pair
    from tests.statistical.test_joint_law import _check_law

    target, _ = tiny_pair()
    drafter = RepeatLast(target[0].vocab_size)
    no_params = (None, None, ())  # what _check_law reads as the drafter's dparams: none
    _check_law((target, no_params, drafter), SamplingParams.make(0.7, 3, 0.9), 3, 20_000, seed=500)
