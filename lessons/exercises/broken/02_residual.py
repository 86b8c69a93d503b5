"""Exercise 2, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: max(0, p − q) is the right shape, but it is not normalised, so it is not a law.
"""

import numpy as np


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(p, float) - np.asarray(q, float), 0.0)
