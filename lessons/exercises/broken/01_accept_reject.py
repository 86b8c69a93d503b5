"""Exercise 1, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: accept whenever the target likes the draft at least as much as the draft did.
That is deterministic where the rule is a coin flip, so tokens the draft over-proposes are
never accepted and the output law is not p (lesson 05 measures the bias).
"""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    return np.asarray(p_x) >= np.asarray(q_x)
