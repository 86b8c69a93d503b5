"""Checks for exercise 5: accepted_counts, the batched leading run, under jax.jit.

The learner's function is jitted and run on ragged batches — rows proposing any number of
drafts from 0 to γ, padding whose uniform would have passed, p(x) = 0 met by u = 0 — and
compared row by row with the library's own `leading_run(accept_reject(u, p_x, q_x) & proposed)`
(nanospec/verify.py). The uniforms are handed over, so nothing is sampled: every check is
exact, and when a row differs the message shows its verdicts.
"""

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.exercises.learner import Failure, plain
from nanospec.verify import accept_reject, leading_run

ROWS = 400  # per γ
EXAMPLE = (
    np.full((2, 3), 0.5),
    np.array([[0.9, 0.2, 0.9], [0.9, 0.9, 0.9]]),
    np.ones((2, 3)),
    np.array([3, 2]),
)


def reference(u, p_x, q_x, n_draft) -> np.ndarray:
    """The library's counts: the leading run of accepted, proposed drafts in each row."""
    proposed = jnp.arange(u.shape[1])[None, :] < n_draft[:, None]
    return np.asarray(leading_run(accept_reject(u, p_x, q_x) & proposed))


def ragged(rng, gamma: int) -> tuple[jax.Array, ...]:
    """ROWS rows: draws accepted about 70% of the time, every n_draft from 0 to γ, and the
    edge cases (all accepted, first rejected, padding that would pass, p(x) = 0 with u = 0)."""
    u = rng.random((ROWS, gamma))
    q_x = rng.uniform(0.05, 1.0, (ROWS, gamma))
    p_x = np.where(
        rng.random((ROWS, gamma)) < 0.7,
        q_x * (1 + rng.random((ROWS, gamma))),
        u * q_x * rng.random((ROWS, gamma)),
    )  # accepted, or rejected
    n_draft = rng.integers(0, gamma + 1, ROWS)
    n_draft[: gamma + 1] = np.arange(gamma + 1)  # every count at least once, all accepted
    p_x[: gamma + 1] = 2.0
    u[-1], p_x[-1], n_draft[-1] = 0.0, 0.0, gamma  # p(x) = 0 must reject even u = 0
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    return f32(u), f32(p_x), f32(q_x), jnp.asarray(n_draft, jnp.int32)


def check_accepted_counts(accepted_counts):
    """Exercise 5: the docstring's example, then three ragged batches, all under jax.jit."""
    jitted = jax.jit(accepted_counts)
    u, p_x, q_x, n_draft = (
        jnp.asarray(x, jnp.int32 if i == 3 else jnp.float32) for i, x in enumerate(EXAMPLE)
    )
    _compare(jitted, u, p_x, q_x, n_draft, "the docstring's example")
    yield "runs inside jax.jit; the docstring's example gives [1, 2]"
    rng = np.random.default_rng(0)
    for gamma in (1, 4, 7):
        _compare(jitted, *ragged(rng, gamma), f"a ragged batch of {ROWS} rows, γ = {gamma},")
    yield (
        f"matches nanospec.verify.leading_run on {3 * ROWS} ragged rows (γ = 1, 4, 7; "
        f"n_draft 0..γ; padding never counts; p(x) = 0 always rejects)"
    )


def _compare(jitted, u, p_x, q_x, n_draft, what: str) -> None:
    out = jitted(u, p_x, q_x, n_draft)
    got = np.asarray(out)
    B = u.shape[0]
    if got.shape != (B,):
        raise Failure(
            f"accepted_counts must return one count per row, shape ({B},); on "
            f"{what} yours returned shape {got.shape}."
        )
    if not np.issubdtype(got.dtype, np.integer):
        raise Failure(
            f"accepted_counts must return integer counts (the loop indexes with "
            f"them); yours are {got.dtype}: {plain(got[:4])}…"
        )
    want = reference(u, p_x, q_x, n_draft)
    bad = np.flatnonzero(got != want)
    if bad.size:
        b = int(bad[0])
        raise Failure(
            f"on {what} row {b} (n_draft = {int(n_draft[b])}) has verdicts "
            f"{_marks(u[b], p_x[b], q_x[b], int(n_draft[b]))}, so it accepts "
            f"{want[b]}; yours says {got[b]}." + _hint(got, u, p_x, q_x, n_draft)
        )


def _marks(u, p_x, q_x, n: int) -> str:
    """A row's verdicts as [✓ ✗ (✓)]: (…) marks a padding slot, what its test would say."""
    ok = np.asarray(u * q_x < p_x)
    return (
        "["
        + " ".join(
            ("✓" if a else "✗") if i < n else f"({'✓' if a else '✗'})" for i, a in enumerate(ok)
        )
        + "]"
    )


def _hint(got, u, p_x, q_x, n_draft) -> str:
    """Name the usual mistake if the learner's counts match it on every row."""
    proposed = np.arange(u.shape[1])[None, :] < np.asarray(n_draft)[:, None]
    ok = np.asarray(u * q_x < p_x)
    run = lambda a: np.cumprod(a, axis=1).sum(axis=1)
    if np.array_equal(got, (ok & proposed).sum(axis=1)):
        return (
            " You counted every accepted draft; a row stops at its first rejection: sum the "
            "cumulative product of its verdicts (the leading run), not the verdicts."
        )
    if np.array_equal(got, run(ok)):
        return (
            " You counted padding: slots i ≥ n_draft were never proposed, so mask them off "
            "(jnp.arange(γ) < n_draft[:, None]) before taking the run."
        )
    first_false = np.argmin(ok & proposed, axis=1)  # 0 when the row has no rejection
    if np.array_equal(got, first_false):
        return (
            " argmin/argmax of the verdicts finds the first rejection, but answers 0 for a "
            "row with none, where every draft was accepted: use the cumulative product."
        )
    if np.array_equal(got, run(np.asarray(u * q_x <= p_x) & proposed)):
        return " A token with p(x) = 0 was accepted with u = 0: compare strictly, u·q < p."
    return ""
