"""Checks for exercises 3 and 8: verify_row and verify_siblings, judged by the laws they emit.

Both are random, so both are run many times on small laws whose correct output law is known
exactly, and the tallies are tested with chi-square (laws.py: each check fails a correct rule
by chance with probability ALPHA = 1e-6; exercise 3 has four such checks, exercise 8 three).
N = 10,000 rounds per case: a mistake that moves any token's probability by 0.03 is caught.
"""

import numpy as np

from nanospec.exercises.laws import differs, show, tv
from nanospec.exercises.learner import Failure, plain

N = 10_000
# Exercise 3's round: γ = 2 drafts over 4 tokens. p has γ + 1 = 3 laws, q has γ.
Q3 = np.array([[0.10, 0.20, 0.30, 0.40], [0.40, 0.30, 0.20, 0.10]])
P3 = np.array([[0.40, 0.30, 0.20, 0.10], [0.25, 0.25, 0.25, 0.25], [0.10, 0.10, 0.10, 0.70]])


BONUS = (
    " When all γ drafts are accepted, the bonus comes from p[γ], the target's law after the "
    "last draft."
)
STOP = " Accept each draft with probability min(1, p/q) and stop at the first rejection."


def _greedy_cases():
    """(drafts, target's argmaxes, expected (n_accepted, token), hint) with one-hot laws."""
    yield [1, 2, 3], [1, 2, 4, 0], (2, 4), STOP  # third draft disagrees: the target's 4
    yield [1, 2, 3], [1, 2, 3, 0], (3, 0), BONUS  # all agree: the bonus, the target's next
    yield [1, 2, 3], [4, 2, 3, 0], (0, 4), STOP  # the first disagrees: nothing accepted


def check_verify_row(verify_row):
    """Exercise 3: greedy known answers, then the laws of a round's emitted tokens."""
    rng = np.random.default_rng(0)
    for drafts, argmax, want, hint in _greedy_cases():
        q, p = np.eye(5)[drafts], np.eye(5)[argmax]
        got = _verdict(verify_row(rng, np.array(drafts), q, p), len(drafts), 5)
        if got != want:
            raise Failure(
                f"at temperature 0 (one-hot laws) drafts {drafts} against the "
                f"target's choices {argmax} should give (n_accepted, token) = {want}; "
                f"yours gave {got}." + (hint if got[0] == want[0] else STOP)
            )
    yield "greedy rounds (one-hot p and q) accept the agreeing prefix, then the target's token"

    gamma, V = Q3.shape
    alpha = np.minimum(P3[:gamma], Q3).sum(axis=1)  # P(accept) at each position
    law_n = np.array(
        [np.prod(alpha[:n]) * (1 - alpha[n] if n < gamma else 1) for n in range(gamma + 1)]
    )
    ns, emitted = np.zeros(gamma + 1), np.zeros((gamma + 1, V))  # emitted[i]: i-th token out
    draft_rng, learner_rng = np.random.default_rng(1), np.random.default_rng(2)
    for _ in range(N):
        drafts = np.array([draft_rng.choice(V, p=Q3[i]) for i in range(gamma)])
        n, token = _verdict(verify_row(learner_rng, drafts, Q3, P3), gamma, V)
        ns[n] += 1
        for i, x in enumerate([*drafts[:n], token]):
            emitted[i, x] += 1
    _fail_if(differs("the number of accepted drafts (0, 1, 2)", ns, law_n), STOP)
    for i in range(gamma):
        hint = _resample_hint(emitted[i], P3[i], Q3[i])
        _fail_if(differs(f"the token emitted at position {i + 1}", emitted[i], P3[i]), hint)
    _fail_if(differs("the bonus token (every draft accepted)", emitted[gamma], P3[gamma]), BONUS)
    yield (
        f"over {N:,} rounds (γ = 2, q = {show(Q3[0])}…), n_accepted and every emitted "
        f"token have the target's laws"
    )


def _verdict(out, gamma: int, V: int) -> tuple[int, int]:
    """The learner's (n_accepted, token) as ints, or a Failure saying what is wrong with it."""
    try:
        n, token = (int(x) for x in out)
    except (TypeError, ValueError):
        raise Failure(
            f"verify_row must return (n_accepted, token), two ints; yours returned {plain(out)!r}."
        ) from None
    if not (0 <= n <= gamma and 0 <= token < V):
        raise Failure(
            f"verify_row returned (n_accepted, token) = ({n}, {token}); n_accepted "
            f"must be 0..{gamma} and token 0..{V - 1}."
        )
    return n, token


def _resample_hint(counts, p, q) -> str:
    """Name the classic mistake (drawing the replacement from p) if the tallies fit it best."""
    seen = counts / counts.sum()
    from_p = np.minimum(p, q) + (1 - np.minimum(p, q).sum()) * p
    if tv(seen, from_p) < tv(seen, p) / 3:
        return (
            " That is the law you get by drawing the replacement from p after a rejection; "
            "draw it from the residual norm(max(0, p − q))."
        )
    return " After a rejection, draw the replacement from norm(max(0, p − q))."


def _fail_if(message: str | None, hint: str) -> None:
    if message is not None:
        raise Failure(message + "." + hint)


# Exercise 8's cases: (p, the law each sibling is drawn from, point masses?).
SIBLING_CASES = (
    (
        "top-2 point masses, the docstring's example",
        np.array([0.5, 0.3, 0.2]),
        np.eye(3)[[0, 1]],
        True,
    ),
    (
        "three siblings drawn i.i.d. from q",
        np.array([0.40, 0.30, 0.20, 0.10]),
        np.tile([0.10, 0.20, 0.30, 0.40], (3, 1)),
        False,
    ),
    (
        "one sibling (plain speculative sampling)",
        np.array([0.40, 0.30, 0.20, 0.10]),
        np.array([[0.25, 0.25, 0.40, 0.10]]),
        False,
    ),
)


def check_verify_siblings(verify_siblings):
    """Exercise 8: the token leaving the node has law p in each case."""
    draft_rng, learner_rng = np.random.default_rng(1), np.random.default_rng(2)
    for name, p, q, point_masses in SIBLING_CASES:
        V, counts = len(p), np.zeros(len(p))
        for _ in range(N):
            candidates = np.array([draft_rng.choice(V, p=qk) for qk in q])
            token = verify_siblings(learner_rng, candidates, q, p)
            if not (isinstance(token, (int, np.integer)) and 0 <= token < V):
                raise Failure(
                    f"verify_siblings must return one token, an int in 0..{V - 1}; "
                    f"yours returned {plain(token)!r}."
                )
            counts[token] += 1
        _fail_if(
            differs(f"with {name}, p = {show(p)}, the token", counts, p),
            " Test each sibling after a rejection against the residual left by the ones "
            "before it, r ← norm(max(0, r − q[k])), not against p; and if all are "
            "rejected, draw from that final r.",
        )
        yield f"{name}: the token has law p over {N:,} runs"
