"""Exercise 2, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: accept whenever the target likes the draft at least as much as the draft did.
That is deterministic where the rule is a coin flip, so tokens the draft over-proposes are
never accepted and the output law is not p (lesson 06 measures the bias). `residual` is right.
"""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    return np.asarray(p_x) >= np.asarray(q_x)


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    res = np.maximum(np.asarray(p, float) - np.asarray(q, float), 0.0)
    return res / res.sum() if res.sum() > 0 else np.asarray(p, float)
