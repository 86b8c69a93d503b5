"""Checks for exercises 3 and 8: verify_row and verify_siblings, judged by the laws they emit.

Both are random, so both are run many times on small laws whose correct output law is known
exactly, and the tallies are tested with chi-square (laws.py: each check fails a correct rule
by chance with probability DELTA = 1e-6; exercise 3 has four such checks, exercise 8 three).
N = 10,000 rounds per case: a mistake that moves 0.03 of probability from one token to another
is caught with probability at least 0.88 (the noncentral chi-square's power; the least is at
exercise 3's second position, which only about 6,000 of the rounds reach).
"""

from itertools import product

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
    """(drafts, target's argmaxes, expected (n_accepted, token)) with one-hot laws."""
    yield [1, 2, 3], [1, 2, 4, 0], (2, 4)  # third draft disagrees: the target's 4
    yield [1, 2, 3], [1, 2, 3, 0], (3, 0)  # all agree: the bonus, the target's next
    yield [1, 2, 3], [4, 2, 3, 0], (0, 4)  # the first disagrees: nothing accepted


def _greedy_hint(got, want, argmax) -> str:
    """What a wrong greedy verdict gets wrong: the count, the bonus, or the replacement."""
    n, gamma = want[0], len(argmax) - 1
    if got[0] != n:
        return STOP
    if n == gamma:
        return BONUS
    return (
        f" n_accepted is right, the token is not: after drafts[{n}] is rejected, the "
        f"replacement comes from norm(max(0, p[{n}] − q[{n}])): with one-hot laws, the "
        f"target's own choice, {argmax[n]}."
    )


def check_verify_row(verify_row):
    """Exercise 3: greedy known answers, then the laws of a round's emitted tokens."""
    rng = np.random.default_rng(0)
    for drafts, argmax, want in _greedy_cases():
        q, p = np.eye(5)[drafts], np.eye(5)[argmax]
        got = _verdict(verify_row(rng, np.array(drafts), q, p), len(drafts), 5)
        if got != want:
            raise Failure(
                f"at temperature 0 (one-hot laws) drafts {drafts} against the "
                f"target's choices {argmax} should give (n_accepted, token) = {want}; "
                f"yours gave {got}." + _greedy_hint(got, want, argmax)
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
    what = "the number of accepted drafts (0, 1, 2)"
    _fail_if(differs(what, ns, law_n, outcome="n_accepted ="), STOP)
    for i in range(gamma):
        where = f"the token emitted at drafts[{i}]'s position"
        hint = _resample_hint(emitted[i], P3[i], Q3[i], i)
        _fail_if(differs(where, emitted[i], P3[i], f"p[{i}]"), hint)
    bonus = "the bonus token (every draft accepted)"
    _fail_if(differs(bonus, emitted[gamma], P3[gamma], f"p[{gamma}]"), BONUS)
    yield (
        f"over {N:,} rounds (γ = 2, q = {show(Q3[0])}…), n_accepted has its law "
        f"{show(law_n)}, and the token emitted at each position the target's law there"
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


def _resample_hint(counts, p, q, i: int) -> str:
    """Name the classic mistake (drawing the replacement from p) if the tallies fit it best."""
    seen = counts / counts.sum()
    from_p = np.minimum(p, q) + (1 - np.minimum(p, q).sum()) * p
    if tv(seen, from_p) < tv(seen, p) / 3:
        return (
            f" That is the law you get by drawing the replacement from p[{i}] after a "
            f"rejection; draw it from the residual norm(max(0, p[{i}] − q[{i}]))."
        )
    return (
        f" After a rejection of drafts[{i}], draw the replacement from "
        f"norm(max(0, p[{i}] − q[{i}]))."
    )


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
    for case in SIBLING_CASES:
        name, p, q, _ = case
        counts = _tally(verify_siblings, p, q, draft_rng, learner_rng)
        what = f"with {name}, p = {show(p)}, the token"
        _fail_if(differs(what, counts, p), _sibling_hint(verify_siblings, case, counts))
        yield f"{name}: the token has law p over {N:,} runs"


def _tally(verify_siblings, p, q, draft_rng, learner_rng) -> np.ndarray:
    """How often each token left the node over N runs, candidates drawn from q."""
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
    return counts


def _sibling_law(p, q, mistake: str = "") -> np.ndarray:
    """The exact law of what leaves the node, summed over every tuple of candidates (one drawn
    from each q[k]), under the right rule or a `mistake`: "against p" (every sibling tested
    against p), "index" (k returned, not its token), "final p" (the last draw from p),
    "unnormalised" (ρ ← max(0, ρ − q[k]) without dividing by its sum; the last draw from it
    normalised, as rng.choice needs)."""
    out = np.zeros(len(p))
    for candidates in product(range(len(p)), repeat=len(q)):
        weight = np.prod([qk[x] for qk, x in zip(q, candidates)])
        rho = np.asarray(p, float)
        for k, (x, qk) in enumerate(zip(candidates, q)):
            if weight == 0:
                break
            accept = min(1.0, (p if mistake == "against p" else rho)[x] / qk[x])
            out[k if mistake == "index" else x] += weight * accept
            weight *= 1 - accept
            left = np.maximum(rho - qk, 0.0)
            if left.sum() > 0:
                rho = left if mistake == "unnormalised" else left / left.sum()
        out += weight * (p if mistake == "final p" else rho / rho.sum())
    return out


SIBLING_MISTAKES = {
    "against p": (
        " That is the law you get by testing every sibling against p: test each one after a "
        "rejection against the residual left by the ones before it, "
        "ρ ← norm(max(0, ρ − q[k])), and if all are rejected, draw from that final ρ."
    ),
    "unnormalised": (
        " That is the law you get by leaving ρ unnormalised after a rejection: divide "
        "max(0, ρ − q[k]) by its sum, ρ ← norm(max(0, ρ − q[k])), so that the next sibling "
        "is tested against a law that sums to 1."
    ),
    "index": (
        " That is the law of k, the accepted sibling's position: return its token, candidates[k]."
    ),
    "final p": (
        " That is the law you get by drawing from p when every sibling is rejected: draw from "
        "the final ρ, the law still owed to the target."
    ),
}


def _fits(counts, p, q, mistakes) -> list[str]:
    """The `mistakes` whose exact laws the tallies fit (a third of their distance from p or
    closer), the closest first."""
    seen = counts / counts.sum()
    gaps = sorted((tv(seen, _sibling_law(p, q, m)), m) for m in mistakes)
    return [m for gap, m in gaps if gap < tv(seen, p) / 3]


def _sibling_hint(verify_siblings, case, counts) -> str:
    """Name the mistake whose exact law the tallies fit best, if one fits; else restate the rule."""
    _, p, q, _ = case
    fits = _fits(counts, p, q, SIBLING_MISTAKES)
    if not fits:
        return (
            " Test sibling k against ρ, the residual left by the ones before it (ρ = p for "
            "the first), return the accepted sibling's token, candidates[k], and if all are "
            "rejected, draw from the final ρ."
        )
    same = [m for m in fits if tv(_sibling_law(p, q, m), _sibling_law(p, q, fits[0])) < 0.01]
    if len(same) > 1:
        same = _tell_apart(verify_siblings, same)
    if len(same) > 1:
        return " Your law fits more than one mistake:" + "".join(SIBLING_MISTAKES[m] for m in same)
    return SIBLING_MISTAKES[same[0]]


def _tell_apart(verify_siblings, mistakes: list[str]) -> list[str]:
    """The one of `mistakes` (which give the failed case the same law) that the learner made,
    found by running their function on the first case where the mistakes' laws differ: testing
    later siblings against p and leaving ρ unnormalised both give the point-mass case
    [.50 .15 .35], and differ on the i.i.d. case. All of them if no case tells them apart."""
    for _, p, q, _ in SIBLING_CASES:
        laws = [_sibling_law(p, q, m) for m in mistakes]
        if min(tv(a, b) for i, a in enumerate(laws) for b in laws[i + 1 :]) > 0.05:
            rngs = np.random.default_rng(3), np.random.default_rng(4)
            return _fits(_tally(verify_siblings, p, q, *rngs), p, q, mistakes)[:1] or mistakes
    return mistakes
