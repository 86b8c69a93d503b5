"""Checks for exercise 2: the accept test and the residual, exact answers on a grid.

Neither needs sampling: `accept_reject` is handed its uniforms, so its acceptance probability
on a grid of 2,000 evenly spaced uniforms is known to within 1/2000, and each verdict must be
u < p/q for the u it was given; `residual` is a formula.
"""

import jax.numpy as jnp
import numpy as np

from nanospec.exercises.laws import show
from nanospec.exercises.learner import Failure, plain
from nanospec.verify import residual as reference_residual

P_GRID = (0.0, 0.05, 0.2, 0.5, 0.8, 1.0)  # the target's p(x)
Q_GRID = (0.05, 0.2, 0.5, 0.8, 1.0)  # the draft's q(x) > 0: x was drawn from q
UNIFORMS = 2000


def check_one_token(accept_reject, residual):
    """Exercise 2: the accept test's checks, then the residual's."""
    yield from check_accept_reject(accept_reject)
    yield from check_residual(residual)


def check_accept_reject(accept_reject):
    """One verdict per draft, min(1, p/q) on a grid and each verdict u < p/q, the
    docstring's example, and p(x) = 0 never accepted."""
    got = np.asarray(
        accept_reject(np.array([0.5, 0.5]), np.array([0.6, 0.1]), np.array([0.9, 0.4]))
    )
    if got.shape != (2,):
        raise Failure(
            f"accept_reject must return one verdict per draft: for 2 drafts it "
            f"returned shape {got.shape}."
        )

    p, q = (np.array(v, float) for v in zip(*[(a, b) for a in P_GRID for b in Q_GRID]))
    u = (np.arange(UNIFORMS) + 0.5) / UNIFORMS  # evenly spaced in (0, 1)
    shape = (len(p), UNIFORMS)
    verdicts = np.asarray(  # writable copies: a rule that works in place is not a mistake
        accept_reject(
            np.broadcast_to(u, shape).copy(),
            np.broadcast_to(p[:, None], shape).copy(),
            np.broadcast_to(q[:, None], shape).copy(),
        )
    )
    rate, want = verdicts.astype(float).mean(axis=1), np.minimum(1.0, p / q)
    i = int(np.argmax(np.abs(rate - want)))
    if abs(rate[i] - want[i]) > 1.0 / UNIFORMS + 1e-9:
        raise Failure(
            f"with p(x) = {p[i]:.2f} and q(x) = {q[i]:.2f} your rule accepts "
            f"{rate[i]:.1%} of uniforms; it must accept min(1, p/q) = {want[i]:.1%}."
            + _accept_hint(rate, p, q, verdicts, u)
        )
    yield f"accepts with probability min(1, p/q) on {len(p)} (p(x), q(x)) pairs"
    _check_follows_u(verdicts, u, p, q)
    yield f"each verdict is u < p(x)/q(x) for the u given ({UNIFORMS:,} a pair)"

    if got.tolist() != [True, False]:  # the grid already caught any wrong rate
        raise Failure(
            f"the docstring's example, u = [.5 .5], p_x = [.6 .1], q_x = [.9 .4], "
            f"should give [True, False]; yours gives {plain(got)}."
        )
    yield "the docstring's example gives [True, False]"

    zero = np.asarray(accept_reject(np.zeros(3), np.zeros(3), np.array([0.2, 0.5, 1.0])))
    if np.any(zero):
        raise Failure(
            "a token the target never writes (p(x) = 0) was accepted with u = 0: "
            "compare strictly, u < p/q (or u·q < p), so p(x) = 0 always rejects."
        )
    yield "never accepts a token the target gives probability 0"


def _check_follows_u(verdicts, u, p, q) -> None:
    """Rates right, verdicts exact: each one must be u < p/q for its own u. No uniform
    (k + ½)/2000 lies on a boundary p/q of the grid (each is a multiple of 1/4000 with an
    even numerator), so u < p/q and u·q < p agree on every one."""
    want = u < np.minimum(1.0, p / q)[:, None]
    wrong = np.argwhere(verdicts.astype(bool) != want)
    if not len(wrong):
        return
    i, k = wrong[0]
    flipped = np.array_equal(verdicts.astype(bool), (1 - u) < np.minimum(1.0, p / q)[:, None])
    raise Failure(
        f"your rates are right, but a verdict is not: with p(x) = {p[i]:.2f}, q(x) = "
        f"{q[i]:.2f} and u = {u[k]:.5f}, {'below' if want[i, k] else 'not below'} p(x)/q(x) "
        f"= {p[i] / q[i]:.3f}, the draft must be {'accepted' if want[i, k] else 'rejected'}; "
        f"yours {'rejects' if want[i, k] else 'accepts'} it. "
        + ("You compared 1 − u, which is uniform too, so the rates come out right. " * flipped)
        + "Accept exactly when u < p(x)/q(x) (u·q(x) < p(x)) for the u you are given: "
        "nanospec/verify.py and exercise 5 use that test, and a verdict that the caller's u "
        "decides can be replayed."
    )


def _accept_hint(rate, p, q, verdicts, u) -> str:
    """Name the usual mistake if the measured acceptance rates match it everywhere; rates
    right to within sampling noise, on the wrong uniforms, are uniforms of the learner's own."""
    close = lambda want: np.all(np.abs(rate - want) <= 1.0 / UNIFORMS + 1e-9)
    if close((p >= q).astype(float)):
        return (
            " It looks like you accept exactly when p(x) ≥ q(x); the rule is a coin flip: "
            "accept when u < p(x)/q(x)."
        )
    if close(np.minimum(1.0, q / np.where(p > 0, p, 1e-12))):
        return " It looks like the ratio is upside down: accept when u < p(x)/q(x)."
    if close(1 - np.minimum(1.0, p / q)):
        return " It looks like the comparison is reversed: accept when u < p/q, not u ≥ p/q."
    want = np.minimum(1.0, p / q)
    noise = 5 * np.sqrt(want * (1 - want) / UNIFORMS) + 1.0 / UNIFORMS  # 5 standard errors
    if np.all(np.abs(rate - want) <= noise) and not np.array_equal(verdicts, u < want[:, None]):
        return (
            " Your rates are right to within sampling noise, but your verdicts do not follow "
            "the uniforms you were given: use u (accept when u < p(x)/q(x)) and draw none of "
            "your own. The caller's u is what makes the verdicts reproducible."
        )
    return ""


def check_residual(residual):
    """The worked example, 200 random pairs against the library, and p == q."""
    got = np.asarray(residual(np.array([0.6, 0.4]), np.array([0.9, 0.1])), float)
    if got.shape != (2,) or not np.allclose(got, [0, 1], atol=1e-6):
        raise Failure(
            f"residual([.6 .4], [.9 .1]) should be [0 1]: the target wants .4 of "
            f"token 1 and the draft gave .1, so all the residual's mass is on token "
            f"1. Yours is {show(got) if got.shape == (2,) else plain(got)}."
            + _residual_hint(got, [0.6, 0.4], [0.9, 0.1])
        )
    yield "the worked example: residual([.6 .4], [.9 .1]) = [0 1]"

    rng = np.random.default_rng(0)
    for _ in range(200):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        got = np.asarray(residual(p.copy(), q.copy()), float)  # theirs to change in place
        want = np.asarray(reference_residual(jnp.asarray(p), jnp.asarray(q)), float)
        if got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
            raise Failure(
                f"for p = {show(p)} and q = {show(q)} the residual is {show(want)}; "
                f"yours is {show(got) if got.shape == want.shape else plain(got)}."
                + _residual_hint(got, p, q)
            )
    yield "matches nanospec.verify.residual on 200 random pairs of laws over 5 tokens"

    p = np.array([0.5, 0.3, 0.2])
    got = np.asarray(residual(p.copy(), p.copy()), float)
    if got.shape != p.shape or not np.allclose(got, p, atol=1e-6):
        raise Failure(
            f"when p == q = {show(p)} the residual is empty; return p so the "
            f"arithmetic stays finite. Yours returned {plain(got)}."
        )
    yield "when p == q it returns p (never NaN)"


def _residual_hint(got, p, q) -> str:
    """Name the usual mistake: no clamp, no normalisation, or q − p."""
    got, p, q = (np.asarray(v, float) for v in (got, p, q))
    if got.shape != p.shape:
        return f" It must have one entry per token, shape {p.shape}."
    if np.any(got < -1e-9):
        return " It has negative entries: clamp p − q at 0 first."
    if not np.isclose(got.sum(), 1, atol=1e-5):
        return f" It sums to {got.sum():.3f}, not 1: divide by the sum of max(0, p − q)."
    flipped = np.maximum(q - p, 0)
    if flipped.sum() > 0 and np.allclose(got, flipped / flipped.sum(), atol=1e-5):
        return (
            " You took max(0, q − p): the residual is where the target wants MORE than the "
            "draft gave, max(0, p − q)."
        )
    return ""
