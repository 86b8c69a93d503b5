"""Exercise 8, a reference solution (try it yourself first: ../08_tree_siblings.py)."""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    rho = np.asarray(p, float)  # ρ: the law still owed to the target
    for x, qk in zip(candidates, q):
        if rng.random() * qk[x] < rho[x]:
            return int(x)
        left = np.maximum(rho - qk, 0.0)
        rho = left / left.sum() if left.sum() > 0 else rho
    return int(rng.choice(len(rho), p=rho))
