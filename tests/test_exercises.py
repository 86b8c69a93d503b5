"""The workshop's exercise checker: every reference solution passes, every broken version fails
with a message that names its mistake, every stub is reported as unwritten, and bad input gets
one sentence and exit 2 — through `nanospec exercise`, as a learner runs it."""

import re

import pytest

from nanospec.cli import main
from nanospec.exercises.sheet import EXERCISES, FOLDER
from tests.exercise_sources import ACCEPT_OK, run_check

# What each deliberately broken version in lessons/exercises/broken/ must be told.
BROKEN_SAYS = {
    1: "your passes wrote 1 token each, not γ + 1 = 4: draft γ tokens, then score all of a "
    "round's drafts with ONE call to target",
    2: "you accept exactly when p(x) ≥ q(x)",
    3: "drawing the replacement from p",
    4: "One slot short: the block began with `last`",
    5: "You counted every accepted draft",
    6: "Your choices match E without its last term",
    7: "a slice reads past the end of the context and stops short",
    8: "against the residual left by the ones before it",
}


def test_exercises_are_numbered_from_one_with_every_file_in_place():
    assert sorted(EXERCISES) == list(range(1, len(EXERCISES) + 1)) and len(EXERCISES) >= 8
    for number, exercise in EXERCISES.items():
        assert exercise.stem.startswith(f"{number:02d}_")
        for folder in (FOLDER, FOLDER / "solutions", FOLDER / "broken"):
            assert (folder / f"{exercise.stem}.py").is_file()
    assert set(BROKEN_SAYS) == set(EXERCISES)


REPO = FOLDER.parent.parent
# What a ✓ line must say it checked, where the check's cases are listed.
SOLUTION_SAYS = {
    1: [
        "γ = 1, 3, 4 and 6",
        "makes at most one target pass a round (γ drafts, or as many as still fit), plus one",
    ],
    2: ["each verdict is u < p(x)/q(x) for the u given (2,000 a pair)"],
    3: ["n_accepted has its law [.40 .12 .48]"],
    5: ["`verify_row`, whose `n_draft` marks where the padding starts"],
    6: ["α = 0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99 and 1; c = 0.01, 0.05, 0.1, 0.2, 0.5 and 1"],
}


def read_after(stub) -> str:
    """The stub's "Read after:" paragraph, on one line, without its full stop."""
    found = re.search(r"^Read after: (.*?)\.\n", stub.read_text(encoding="utf-8"), re.M | re.S)
    return " ".join(found.group(1).split())


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_reference_solution_passes(number):
    stem = EXERCISES[number].stem
    ok, out = run_check(number, FOLDER / "solutions" / f"{stem}.py")
    assert ok, out
    said = " ".join(out.split())
    for words in SOLUTION_SAYS.get(number, []):
        assert words in said, said
    # The last line names files as the learner, at the repository's root, finds them.
    last = said[said.index("All checks passed") :]
    assert last == (
        f"All checks passed. Compare with lessons/exercises/solutions/{stem}.py, then read "
        f"{read_after(EXERCISES[number].stub)}."
    )
    for path in re.findall(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|md)", last):
        assert (REPO / path).is_file(), path


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


BAD_INPUT = [
    (["exercise", "check", "9"], None, "There is no exercise 9; the exercises are 1 to 8"),
    (["exercise", "check"], None, "Say which exercise to check"),
    (["exercise", "check", "2", "--file", "{tmp}/nope.py"], None, "No file at"),
    (["exercise", "check", "2", "--file", "{tmp}/mine.txt"], "x = 1\n", "is not a Python file"),
    (
        ["exercise", "check", "2", "--file", "{tmp}/mine.py"],
        "def accept_reject(u, p_x, q_x)\n    return u\n",
        "mine.py line 1: expected ':'",
    ),
    (
        ["exercise", "check", "2", "--file", "{tmp}/mine.py"],
        "def accept_reject(u, p):\n    return u\n",
        "accept_reject in {tmp}/mine.py takes (u, p); the exercise needs (u, p_x, q_x).",
    ),
    (
        ["exercise", "check", "2", "--file", "{tmp}/mine.py"],
        ACCEPT_OK + "def resid(p, q):\n    return p\n",
        "defines no function named residual",
    ),
    (
        ["exercise", "check", "2", "--file", "{tmp}/mine.py"],
        "import torch_not_here\n",
        "failed at line 1: ModuleNotFoundError",
    ),
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
    stem = EXERCISES[2].stem
    assert main(["exercise", "check", "2", "--file", str(FOLDER / "solutions" / f"{stem}.py")]) == 0
    assert main(["exercise", "check", "2", "--file", str(FOLDER / "broken" / f"{stem}.py")]) == 1
    assert main(["exercise", "list"]) == 0
    assert "verify_row(rng, drafts, q, p)" in capsys.readouterr().out
