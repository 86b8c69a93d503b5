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
    1: "Score all of a round's drafts with ONE call to target",
    2: "you accept exactly when p(x) ≥ q(x)",
    3: "drawing the replacement from p",
    4: "One slot short: the block began with `last`",
    5: "You counted every accepted draft",
    6: "Your choices match E without its last term",
    7: "a slice reads past the end of the context and stops short",
    8: "against the residual left by the ones before it",
}


def run_check(number: int, path) -> tuple[bool, str]:
    out = io.StringIO()
    ok = check(number, str(path), Console(file=out, width=1000, highlight=False))
    return ok, out.getvalue()


def write(tmp_path, source: str, name: str = "mine.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_exercises_are_numbered_from_one_with_every_file_in_place():
    assert sorted(EXERCISES) == list(range(1, len(EXERCISES) + 1)) and len(EXERCISES) >= 8
    for number, exercise in EXERCISES.items():
        assert exercise.stem.startswith(f"{number:02d}_")
        for folder in (FOLDER, FOLDER / "solutions", FOLDER / "broken"):
            assert (folder / f"{exercise.stem}.py").is_file()
    assert set(BROKEN_SAYS) == set(EXERCISES)


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


# Exercise 2 asks for two functions: each mistake comes with a right version of the other.
ACCEPT_OK = "def accept_reject(u, p_x, q_x):\n    return u * q_x < p_x\n"
RESIDUAL_OK = (
    "import numpy as np\ndef residual(p, q):\n    res = np.maximum(p - q, 0)\n"
    "    return res / res.sum() if res.sum() > 0 else p\n"
)
# Exercise 1's loop, with its stopping rule and what it returns left to fill in.
LOOP = """
def greedy_speculative(target, draft, prompt, gamma, max_new):
    out = []
    while len(out) < {until}:
        ctx = prompt + out
        drafts = []
        for _ in range(min(gamma, max_new - len(out) - 1)):
            drafts.append(draft(ctx + drafts))
        choice = target(ctx + drafts)[len(ctx) - 1:]
        n = 0
        while n < len(drafts) and drafts[n] == choice[n]:
            n += 1
        out += drafts[:n] + [choice[n]]
    return {out}
"""
# Exercise 3's round, with the law a rejected draft is replaced from left to fill in.
ROW = """
import numpy as np
def verify_row(rng, drafts, q, p):
    for i, x in enumerate(drafts):
        if rng.random() * q[i, x] >= p[i, x]:
            law = {replacement}
            return i, int(rng.choice(len(law), p=law / law.sum()))
    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts)]))
"""
# Exercise 8's walk, with the law each sibling is tested against, what an accepted sibling
# returns and the law of the last draw left to fill in.
SIBLINGS = """
import numpy as np
def verify_siblings(rng, candidates, q, p):
    rho = np.asarray(p, float)
    for k, (x, qk) in enumerate(zip(candidates, q)):
        if rng.random() * qk[x] < {test}[x]:
            return {accepted}
        left = np.maximum(rho - qk, 0.0)
        rho = left / left.sum() if left.sum() > 0 else rho
    return int(rng.choice(len(rho), p={final}))
"""
siblings_with = lambda **wrong: SIBLINGS.format(
    **{"test": "rho", "accepted": "int(x)", "final": "rho", **wrong}
)
# Exercise 4's round, with the three lines a learner gets wrong left to fill in.
ROUND = """
import numpy as np
def verify_and_rollback(target, cache, last, drafts):
    start = cache.length
    logits, cache = target({block}, cache)
    choice = np.argmax(logits, axis=-1)
    n = 0
    while n < len(drafts) and drafts[n] == choice[{row}]:
        n += 1
    return n, int(choice[n]), {cache}
"""
RIGHT = {"block": "[last, *drafts]", "row": "n", "cache": "cache._replace(length=start + n + 1)"}
round_with = lambda **wrong: ROUND.format(**{**RIGHT, **wrong})
COUNTS = "import jax.numpy as jnp\ndef accepted_counts(u, p_x, q_x, n_draft):\n"
PROPOSED = "    proposed = jnp.arange(u.shape[1])[None] < n_draft[:, None]\n"
GAMMA = "def best_gamma(alpha, c, r, gammas):\n    s = [{} for g, rg in zip(gammas, r)]\n"
E = "sum(alpha ** i for i in range(g + 1))"
LOOKUP = """
def lookup(context, gamma, max_ngram=3, min_ngram=1):
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        for j in {ends}:
            if context[j - n + 1: j + 1] == context[L - n:]:
                return {copy}
    return []
"""
WRAP = "[context[j + 1 + i % (L - 1 - j)] for i in range(gamma)]"

# More mistakes a learner makes, each with the words that must name it.
MISTAKES = [
    (
        1,
        "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    out = []\n"
        "    while len(out) < max_new:\n"
        "        ctx = prompt + out\n"
        "        drafts = [draft(ctx)]\n"
        "        choice = target(ctx + drafts)[len(ctx) - 1:]\n"
        "        out += drafts if drafts[0] == choice[0] else [choice[0]]\n"
        "        out.append(choice[-1])\n"
        "    return out\n",
        "stop at max_new",
    ),
    (
        1,
        "def greedy_speculative(target, draft, prompt, gamma, max_new):\n"
        "    return [draft(prompt)] * max_new\n",
        "differs from greedy decoding at new token",
    ),
    (
        1,
        LOOP.format(until="max_new - 1", out="out"),
        "yours returned 4: keep going until max_new new tokens are written",
    ),
    (
        1,
        LOOP.format(until="max_new", out="prompt + out"),
        "yours returned 6: return only the new tokens, not the prompt before them",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u > p_x / q_x\n" + RESIDUAL_OK,
        "the comparison is reversed",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u < q_x / p_x\n" + RESIDUAL_OK,
        "ratio is upside down",
    ),
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    return u * q_x <= p_x\n" + RESIDUAL_OK,
        "compare strictly",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    return np.maximum(p - q, 0)\n",
        "not 1: divide by the sum of max(0, p − q)",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    r = np.maximum(q - p, 0)\n"
        "    return r / r.sum() if r.sum() > 0 else p\n",
        "You took max(0, q − p)",
    ),
    (
        2,
        ACCEPT_OK + "import numpy as np\ndef residual(p, q):\n    r = p - q\n"
        "    return r / r.sum()\n",
        "negative entries",
    ),
    (
        3,
        "import numpy as np\ndef verify_row(rng, drafts, q, p):\n"
        "    for i, x in enumerate(drafts):\n"
        "        if rng.random() * q[i, x] >= p[i, x]:\n"
        "            r = np.maximum(p[i] - q[i], 0)\n"
        "            return i, int(rng.choice(len(r), p=r / r.sum()))\n"
        "    return len(drafts), int(rng.choice(p.shape[1], p=p[len(drafts) - 1]))\n",
        "the bonus comes from p[γ]",
    ),
    (3, "def verify_row(rng, drafts, q, p):\n    return [0]\n", "must return (n_accepted, token)"),
    (
        3,
        ROW.format(replacement="np.maximum(p[i + 1] - q[i], 0)"),  # the next row's p
        "yours gave (2, 0). n_accepted is right, the token is not: after drafts[2] is rejected, "
        "the replacement comes from norm(max(0, p[2] − q[2]))",
    ),
    (
        3,
        ROW.format(replacement="np.maximum(p[i] - q[i], 0) ** 2"),  # right for one-hot laws
        "the token emitted at drafts[0]'s position should have the law p[0] = [.40 .30 .20 .10]",
    ),
    (4, round_with(cache="cache"), "You never rolled back"),
    (
        4,
        round_with(cache="cache._replace(length=start + n + 2)"),
        "One slot too many: slot 8 holds the keys of the rejected draft",
    ),
    (4, round_with(block="list(drafts)"), "it must be over [last] + drafts = [5,"),
    (4, round_with(row="n + 1"), "Row i scores the token after block[i]"),
    (
        4,
        round_with(cache="cache._replace(k=tuple(b[:, :9] for b in cache.k))"),
        "roll back by setting the length alone",
    ),
    (
        5,
        COUNTS + PROPOSED + "    return jnp.argmin((u * q_x < p_x) & proposed, axis=1)\n",
        "answers 0 for a row with none",
    ),
    (
        5,
        COUNTS + "    return jnp.sum(jnp.cumprod(u * q_x < p_x, axis=1), axis=1)\n",
        "You counted padding",
    ),
    (
        5,
        COUNTS + "    n = 0\n    while u[0, n] * q_x[0, n] < p_x[0, n]:\n        n += 1\n"
        "    return jnp.array([n])\n",
        "cannot run inside jax.jit: at line 4 of mine.py",
    ),
    (
        5,
        COUNTS + PROPOSED + "    return jnp.sum(jnp.cumprod((u * q_x <= p_x) & proposed, axis=1), "
        "axis=1)\n",
        "compare strictly, u·q < p",
    ),
    (
        6,
        GAMMA.format(f"{E} / (g * c + rg)") + "    return s.index(max(s))\n",
        "That looks like a position in the list",
    ),
    (
        6,
        GAMMA.format(f"{E} / rg") + "    return gammas[s.index(max(s))]\n",
        "a model with free drafts",
    ),
    (
        6,
        GAMMA.format(f"{E} / (g * c + rg * (g + 1))") + "    return gammas[s.index(max(s))]\n",
        "a verify pass costing r per token",
    ),
    (
        6,
        GAMMA.format("(1 - alpha ** (g + 1)) / (1 - alpha) / (g * c + rg)")
        + "    return gammas[s.index(max(s))]\n",
        "with α = 1 and c = 0.01, your best_gamma raised ZeroDivisionError at line 2 of mine.py",
    ),
    (7, LOOKUP.format(ends="range(n - 1, L)", copy=WRAP), "the 'occurrence' is the suffix itself"),
    (
        7,
        LOOKUP.format(ends="range(n - 1, L)", copy="context[j + 1: j + 1 + gamma]"),
        "if you matched the suffix with itself",
    ),
    (
        7,
        LOOKUP.format(ends="range(L - 2, n - 2, -1)", copy=WRAP),
        "You copied after the latest occurrence",
    ),
    (
        7,
        "def lookup(context, gamma, max_ngram=3, min_ngram=1):\n    return (9, 7, 8, 9)\n",
        "lookup must return a list of ints; yours returned a tuple, (9, 7, 8, 9)",
    ),
    (
        7,
        "def lookup(context, gamma, max_ngram=3, min_ngram=1):\n    raise ValueError('oops')\n",
        "your lookup raised ValueError at line 2 of mine.py: oops",
    ),
    (
        8,
        "def verify_siblings(rng, candidates, q, p):\n    return candidates[0]\n",
        "the token should have the law",
    ),
    (8, siblings_with(accepted="k"), "That is the law of k, the accepted sibling's position"),
    (8, siblings_with(final="p"), "drawing from p when every sibling is rejected"),
]


@pytest.mark.parametrize("number, source, says", MISTAKES)
def test_common_mistakes_are_named(tmp_path, number, source, says):
    ok, out = run_check(number, write(tmp_path, source))
    assert not ok
    assert says in " ".join(out.split()), out


# Right answers that differ from the reference solutions: they must pass too.
ALSO_RIGHT = [
    (
        2,
        "def accept_reject(u, p_x, q_x):\n    u *= q_x\n    return u < p_x\n" + RESIDUAL_OK,
    ),  # working in place on the inputs is allowed
    (
        4,
        round_with(
            cache="cache._replace(length=start + n + 1, k=tuple(b.at[:, int(start[0]) + n "
            "+ 1:].set(0) for b in cache.k))"
        ),
    ),  # erasing stale slots is allowed
    (
        5,
        "import numpy as np\ndef accepted_counts(u, p_x, q_x, n_draft):\n"  # numpy's names work
        "    ok = (u * q_x < p_x) & (np.arange(u.shape[1])[None] < n_draft[:, None])\n"
        "    return np.cumprod(ok, axis=1).sum(axis=1)\n",
    ),
    (
        6,
        "import numpy as np\ndef best_gamma(alpha, c, r, gammas):\n"
        "    g = np.array(gammas)\n"
        "    e = g + 1.0 if alpha == 1 else (1 - alpha ** (g + 1)) / (1 - alpha)\n"
        "    return gammas[int(np.argmax(e / (g * c + np.array(r))))]\n",
    ),
]


@pytest.mark.parametrize("number, source", ALSO_RIGHT)
def test_other_right_answers_pass(tmp_path, number, source):
    ok, out = run_check(number, write(tmp_path, source))
    assert ok, out


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
