"""Exercise 3, a reference solution (try it yourself first: ../03_verify_row.py)."""

import numpy as np


def verify_row(
    rng: np.random.Generator, drafts: np.ndarray, q: np.ndarray, p: np.ndarray
) -> tuple[int, int]:
    gamma, V = len(drafts), p.shape[-1]
    for i, x in enumerate(drafts):
        if rng.random() * q[i, x] >= p[i, x]:  # rejected: replace it from the residual
            res = np.maximum(p[i] - q[i], 0.0)
            return i, int(rng.choice(V, p=res / res.sum()))
    return gamma, int(rng.choice(V, p=p[gamma]))  # all accepted: the bonus token
