"""The workshop's exercise checker: every reference solution passes, every broken version fails
with a message that names its mistake, every stub is reported as unwritten, and bad input gets
one sentence and exit 2 — through `nanospec exercise`, as a learner runs it."""

import io
import textwrap

import pytest
from rich.console import Console

from nanospec.cli import main
from nanospec.exercises.sheet import EXERCISES, FOLDER, check

# What each deliberately broken version in lessons/exercises/broken/ must be told.
BROKEN_SAYS = {
    1: "you accept exactly when p(x) ≥ q(x)",
    2: "not 1: divide by the sum of max(0, p − q)",
    3: "drawing the replacement from p",
    4: "You copied after the latest occurrence",
    5: "Score all of a round's drafts with ONE call to target",
    6: "against the residual left by the ones before it",
}


def run_check(number: int, path) -> tuple[bool, str]:
    out = io.StringIO()
    ok = check(number, str(path), Console(file=out, width=1000, highlight=False))
    return ok, out.getvalue()


def write(tmp_path, source: str, name: str = "mine.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_reference_solution_passes(number):
    ok, out = run_check(number, FOLDER / "solutions" / f"{EXERCISES[number].stem}.py")
    assert ok, out
    assert "All checks passed" in out


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_broken_version_fails_naming_its_mistake(number):
    ok, out = run_check(number, FOLDER / "broken" / f"{EXERCISES[number].stem}.py")
    assert not ok
    assert BROKEN_SAYS[number] in " ".join(out.split()), out


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_unwritten_stub_is_reported_as_the_stub(number):
    ok, out = run_check(number, EXERCISES[number].stub)
    assert not ok
    assert "still the stub" in out


# More mistakes a learner makes, each with the words that must name it.
MISTAKES = [
    (1, "def accept_reject(u, p_x, q_x):\n    return u > p_x / q_x\n",
     "the comparison is reversed"),
    (1, "def accept_reject(u, p_x, q_x):\n    return u < q_x / p_x\n", "ratio is upside down"),
    (1, "def accept_reject(u, p_x, q_x):\n    return u * q_x <= p_x\n", "compare strictly"),
    (2, "import numpy as np\ndef residual(p, q):\n    r = np.maximum(q - p, 0)\n"
        "    return r / r.sum() if r.sum() > 0 else p\n", "You took max(0, q − p)"),
    (2, "import numpy as np\ndef residual(p, q):\n    r = p - q\n    return r / r.sum()\n",
     "negative entries"),
    (3, "import numpy as np\ndef verify_row(rng, drafts, q, p):\n"
        "    for i, x in enumerate(drafts):\n"
        "        if rng.random() * q[i, x] >= p[i, x]:\n"
        "            r = np.maximum(p[i] - q[i], 0)\n"
        "            return i, int(rng.choice(len(r), p=r / r.sum()))\n"
        "    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts) - 1]))\n",
     "the bonus comes from p[γ]"),
    (3, "def verify_row(rng, drafts, q, p):\n    return [0]\n", "must return (n_accepted, token)"),
    (5, "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    out = []\n"
        "    while len(out) < max_new:\n"
        "        ctx = prompt + out\n"
        "        drafts = [draft(ctx)]\n"
        "        choice = target(ctx + drafts)[len(ctx) - 1:]\n"
        "        out += drafts if drafts[0] == choice[0] else [choice[0]]\n"
        "        out.append(choice[-1])\n"
        "    return out\n", "stop at max_new"),
    (5, "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    return [draft(prompt)] * max_new\n", "differs from greedy decoding at new token"),
    (6, "def verify_siblings(rng, candidates, q, p):\n    return candidates[0]\n",
     "the token should have the law"),
    (4, "def lookup(context, gamma, max_ngram=3, min_ngram=1):\n    raise ValueError('oops')\n",
     "your lookup raised ValueError at line 2 of mine.py: oops"),
]


@pytest.mark.parametrize("number, source, says", MISTAKES)
def test_common_mistakes_are_named(tmp_path, number, source, says):
    ok, out = run_check(number, write(tmp_path, source))
    assert not ok
    assert says in " ".join(out.split()), out


BAD_INPUT = [
    (["exercise", "check", "9"], None, "There is no exercise 9; the exercises are 1 to 6"),
    (["exercise", "check"], None, "Say which exercise to check"),
    (["exercise", "check", "1", "--file", "{tmp}/nope.py"], None, "No file at"),
    (["exercise", "check", "1", "--file", "{tmp}/mine.txt"], "x = 1\n", "is not a Python file"),
    (["exercise", "check", "1", "--file", "{tmp}/mine.py"],
     "def accept_reject(u, p_x, q_x)\n    return u\n", "mine.py line 1: expected ':'"),
    (["exercise", "check", "1", "--file", "{tmp}/mine.py"],
     "def accept_reject(u, p):\n    return u\n",
     "accept_reject in {tmp}/mine.py takes (u, p); the exercise needs (u, p_x, q_x)."),
    (["exercise", "check", "2", "--file", "{tmp}/mine.py"], "def resid(p, q):\n    return p\n",
     "defines no function named residual"),
    (["exercise", "check", "2", "--file", "{tmp}/mine.py"], "import torch_not_here\n",
     "failed at line 1: ModuleNotFoundError"),
]


@pytest.mark.parametrize("argv, source, says", BAD_INPUT)
def test_bad_input_gets_one_sentence_and_exit_2(tmp_path, capsys, argv, source, says):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if source is not None:
        (tmp_path / argv[-1].rsplit("/", 1)[-1]).write_text(source)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert says.replace("{tmp}", str(tmp_path)) in err


def test_cli_exit_codes_pass_and_fail(capsys):
    solution = FOLDER / "solutions" / "02_residual.py"
    assert main(["exercise", "check", "2", "--file", str(solution)]) == 0
    assert main(["exercise", "check", "2", "--file", str(FOLDER / "broken" / "02_residual.py")]) == 1
    assert main(["exercise", "list"]) == 0
    assert "verify_row(rng, drafts, q, p)" in capsys.readouterr().out
