"""Exercise 8, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: every sibling is tested against the target's p, never against the residual r
left by the rejected siblings before it — so the first siblings' tokens come out too often.
"""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    r = np.asarray(p, float)
    for x, qk in zip(candidates, q):
        if rng.random() * qk[x] < p[x]:
            return int(x)
        left = np.maximum(r - qk, 0.0)
        r = left / left.sum() if left.sum() > 0 else r
    return int(rng.choice(len(r), p=r))
