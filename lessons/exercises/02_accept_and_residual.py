"""Exercise 2 — one token, exactly: the accept test and the residual.

The draft proposed token x, which it drew with probability q(x); the target gives x
probability p(x). Two functions decide what comes out, and together they make its law p.

`accept_reject(u, p_x, q_x)`: accept x with probability min(1, p(x) / q(x)), using a uniform
u ~ U[0, 1) the caller drew for you: accept exactly when u < p(x)/q(x) (the checker compares
every verdict with that test, not only how often you accept). Work on whole arrays at once
(numpy): one verdict each.

    >>> accept_reject(np.array([.5, .5]), np.array([.6, .1]), np.array([.9, .4]))
    array([ True, False])

The first draft is accepted (.5 < .6/.9 ≈ .67), the second rejected (.5 ≥ .1/.4 = .25).
Careful: a token the target never writes (p(x) = 0) must never be accepted, whatever u is.

`residual(p, q)`: after a rejection the replacement is drawn from norm(max(0, p − q)), the
mass the target wants that the draft under-proposed, normalised to sum to 1. Accepted tokens
supply min(p, q); the residual tops every token up to p.

    >>> residual(np.array([.6, .4]), np.array([.9, .1]))
    array([0., 1.])

If p == q the residual is empty (all zeros). The verify rule never samples from it then
(every draft is accepted), so return p in that case, to keep the arithmetic finite.

Check it:   nanospec exercise check 2   (accept_reject first, then residual)
Read after: nanospec/verify.py (`accept_reject`, `residual`), lessons 04–06.
"""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    """u, p_x, q_x: arrays of one shape (q_x > 0). Returns a bool array: accept each draft?"""
    raise NotImplementedError("write accept_reject")


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p, q: laws over the same vocabulary, shape (V,). Returns the residual law, shape (V,)."""
    raise NotImplementedError("write residual")
