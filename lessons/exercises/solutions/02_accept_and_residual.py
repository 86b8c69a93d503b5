"""Exercise 2, a reference solution (try it yourself first: ../02_accept_and_residual.py)."""

import numpy as np


def accept_reject(u: np.ndarray, p_x: np.ndarray, q_x: np.ndarray) -> np.ndarray:
    # u < p/q, written as u·q < p so it never divides; strict, so p(x) = 0 is never accepted.
    return np.asarray(u) * np.asarray(q_x) < np.asarray(p_x)


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    res = np.maximum(np.asarray(p, float) - np.asarray(q, float), 0.0)
    total = res.sum()
    return res / total if total > 0 else np.asarray(p, float)
