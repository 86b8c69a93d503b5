"""Exercise 3, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: after a rejection, draw the replacement from the target's law p instead of the
residual norm(max(0, p − q)). Tokens the draft already supplies come out too often.
"""

import numpy as np


def verify_row(
    rng: np.random.Generator, drafts: np.ndarray, q: np.ndarray, p: np.ndarray
) -> tuple[int, int]:
    gamma, V = len(drafts), p.shape[-1]
    for i, x in enumerate(drafts):
        if rng.random() * q[i, x] >= p[i, x]:
            return i, int(rng.choice(V, p=p[i]))
    return gamma, int(rng.choice(V, p=p[gamma]))
