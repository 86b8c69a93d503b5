"""Layer 1 — exact identity, no sampling: the verify rule's output law equals p, to float64 precision.

For a single draft position the law of the token that comes out is

    P(y) = q(y)·a(y) + (1 − Σ_x q(x)·a(x)) · r(y)

where a(x) is the probability that `accept_reject` accepts draft x and r = `residual(p, q)`.
Both are taken from the implementation itself: r by calling it, a(x) by measuring the set of
uniforms u ∈ [0, 1) that `accept_reject` accepts (it must be an interval [0, a); a bisection
finds its end to 1e-15). Hypothesis draws (p, q) from Dirichlets with small and large
concentration, sparse supports, q with zeros where p has mass, p == q, one-hot, and top-k /
top-p truncated laws. Threshold: |P − p| < 1e-9 everywhere. No randomness is involved in the
check, so its false-failure probability is 0; a failure is a bug (or float64 round-off
beyond 1e-9, which these laws never reach).
"""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanospec.compat import enable_x64
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.verify import accept_reject, residual, verify_row

TOL = 1e-9


def acceptance_probability(p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    """Lebesgue measure of {u in [0, 1): accept_reject(u, p_x, q_x)}, measured by bisection."""
    with enable_x64(True):
        f = lambda u: np.asarray(accept_reject(u, p_x, q_x))
        assert np.all(f(np.zeros_like(p_x)) == (p_x > 0)), "accept set must start at u = 0"
        lo, hi = np.zeros_like(p_x), np.ones_like(p_x)
        inside_at_1 = f(np.nextafter(np.ones_like(p_x), 0))
        for _ in range(60):
            mid = (lo + hi) / 2
            yes = f(mid)
            lo, hi = np.where(yes, mid, lo), np.where(yes, hi, mid)
        return np.where(inside_at_1, 1.0, np.where(p_x > 0, lo, 0.0))


def output_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    a = acceptance_probability(p, q)
    with enable_x64(True):
        r = np.asarray(residual(p, q))
    return q * a + (1 - np.sum(q * a)) * r


def _normalise(x):
    x = np.asarray(x, np.float64)
    return x / x.sum()


@st.composite
def laws(draw, V=None):
    V = V or draw(st.integers(2, 12))
    kind = draw(st.sampled_from(["dirichlet", "sparse", "onehot", "truncated"]))
    alpha = draw(st.sampled_from([0.05, 0.3, 1.0, 20.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.dirichlet(np.full(V, alpha))
    if kind == "sparse":
        x[rng.random(V) < 0.5] = 0
        x[rng.integers(V)] += 1e-3
    elif kind == "onehot":
        x = np.eye(V)[rng.integers(V)]
    elif kind == "truncated":
        k, top_p = int(rng.integers(1, V + 1)), float(rng.uniform(0.1, 1.0))
        logits = np.log(x + 1e-12)
        with enable_x64(True):
            x = np.asarray(sampling_probs(logits, SamplingParams.make(1.0, k, top_p)), np.float64)
    return _normalise(x)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_output_law_equals_p_for_random_pairs(data):
    V = data.draw(st.integers(2, 12))
    p, q = data.draw(laws(V)), data.draw(laws(V))
    if data.draw(st.booleans()):
        q = p.copy()  # p == q: everything accepted, the residual is never used
    np.testing.assert_allclose(output_law(p, q), p, atol=TOL)


@pytest.mark.parametrize(
    "p,q",
    [
        ([0.6, 0.4], [0.9, 0.1]),  # the worked example in verify.py
        ([0.5, 0.5, 0.0], [0.0, 0.0, 1.0]),  # q puts all mass where p has none
        ([1.0, 0.0, 0.0], [0.2, 0.3, 0.5]),  # greedy target, sampled draft
        ([0.1, 0.2, 0.7], [0.0, 0.0, 1.0]),  # point-mass draft (prompt lookup, argmax heads)
    ],
)
def test_known_cases(p, q):
    np.testing.assert_allclose(output_law(_normalise(p), _normalise(q)), _normalise(p), atol=TOL)


def test_worked_example_numbers():
    a = acceptance_probability(np.array([0.6, 0.4]), np.array([0.9, 0.1]))
    np.testing.assert_allclose(a, [2 / 3, 1.0], atol=1e-12)
    with enable_x64(True):
        np.testing.assert_allclose(residual(np.array([0.6, 0.4]), np.array([0.9, 0.1])), [0, 1])


def test_point_mass_draft_accepts_with_p_and_resamples_p_without_x():
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.0, 0.0, 1.0])
    assert acceptance_probability(p, q)[2] == pytest.approx(0.7, abs=1e-12)
    with enable_x64(True):
        np.testing.assert_allclose(residual(p, q), [1 / 3, 2 / 3, 0], atol=1e-12)


def test_greedy_accepts_iff_draft_is_the_argmax_and_corrects_to_it():
    p = np.eye(4)[2][None].repeat(2, 0)  # (γ+1 = 2, V): target argmax is token 2
    for draft, expect in [(2, (1, True)), (1, (0, False))]:
        q = np.eye(4)[draft][None]
        v = verify_row(jax.random.key(0), np.array([draft]), q, p)
        assert (int(v.n_accepted), bool(v.is_bonus)) == expect
        assert int(v.token) == 2  # the bonus (argmax) or the correction (argmax)
