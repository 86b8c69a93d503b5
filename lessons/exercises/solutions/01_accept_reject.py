"""Exercise 1, a reference solution (try it yourself first: ../01_accept_reject.py)."""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    # u < p/q, written as u·q < p so it never divides; strict, so p(x) = 0 is never accepted.
    return np.asarray(u) * np.asarray(q_x) < np.asarray(p_x)
