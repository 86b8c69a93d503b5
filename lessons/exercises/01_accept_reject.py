"""Exercise 1 — accept or reject one drafted token.

The draft proposed token x, which it drew with probability q(x); the target gives x
probability p(x). Speculative sampling accepts x with probability min(1, p(x) / q(x)), using a
uniform u ~ U[0, 1) that the caller drew for you.

Implement `accept_reject` for whole arrays at once (numpy): one verdict per element.

    >>> accept_reject(np.array([.5, .5]), np.array([.6, .1]), np.array([.9, .4]))
    array([ True, False])

The first draft is accepted (.5 < .6/.9 ≈ .67), the second rejected (.5 ≥ .1/.4 = .25).
Careful: a token the target never writes (p(x) = 0) must never be accepted, whatever u is.

Check it:   nanospec exercise check 1
Read after: nanospec/verify.py (`accept_reject`), lesson 04.
"""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    """u, p_x, q_x: arrays of one shape (q_x > 0). Returns a bool array: accept each draft?"""
    raise NotImplementedError("write accept_reject")
