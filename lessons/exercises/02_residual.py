"""Exercise 2 — the residual law.

When a draft is rejected, the replacement token is drawn from the *residual*

    residual(p, q) = norm(max(0, p − q))

the mass the target wants (p) that the draft under-proposed (q), normalised to sum to 1. It
is what makes the output law exactly p: accepted tokens supply min(p, q), the residual tops
every token up to p.

    >>> residual(np.array([.6, .4]), np.array([.9, .1]))
    array([0., 1.])

If p == q the residual is empty (all zeros). The verify rule never samples from it then
(every draft is accepted), so return p in that case, to keep the arithmetic finite.

Check it:   nanospec exercise check 2
Read after: nanospec/verify.py (`residual`), lesson 04.
"""

import numpy as np


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p, q: laws over the same vocabulary, shape (V,). Returns the residual law, shape (V,)."""
    raise NotImplementedError("write residual")
