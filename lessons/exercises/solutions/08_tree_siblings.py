"""Exercise 8, a reference solution (try it yourself first: ../08_tree_siblings.py)."""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    r = np.asarray(p, float)
    for x, qk in zip(candidates, q):
        if rng.random() * qk[x] < r[x]:
            return int(x)
        left = np.maximum(r - qk, 0.0)
        r = left / left.sum() if left.sum() > 0 else r
    return int(rng.choice(len(r), p=r))
