"""Exercise 3, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: after a rejection, draw the replacement from the target's law p[i] instead of the
residual norm(max(0, p[i] − q[i])). The token emitted at drafts[i]'s position then has the law
min(p, q) + (1 − Σ min(p, q))·p instead of p (p = p[i], q = q[i]): too much of the tokens the
draft already supplies, too little of those it under-proposes most. At the checker's first
position, q = [.1 .2 .3 .4] and p = [.4 .3 .2 .1], that law is [.26 .32 .28 .14]: token 0
comes out .26 instead of .40, the largest gap, and the one the checker reports.
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
