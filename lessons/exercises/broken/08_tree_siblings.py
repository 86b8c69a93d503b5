"""Exercise 8, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: every sibling is tested against the target's p, never against the residual ρ
left by the rejected siblings before it (ρ is still updated, and the final draw uses it). The
first sibling is tested right, against ρ = p; the later ones are not. In the checker's first
case, p = [.5 .3 .2] with point masses on 0 then 1, the second sibling's token 1 is accepted
with p(1) = .3 instead of ρ(1) = .6, so it comes out .5 · .3 = .15 instead of .3: too rarely;
and the final draw from ρ = [0 0 1] comes out .5 · .7 = .35 instead of .2: too often. (The
checker sees [.50 .15 .34] over its 10,000 draws.)
"""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    rho = np.asarray(p, float)
    for x, qk in zip(candidates, q):
        if rng.random() * qk[x] < p[x]:  # against p, not ρ: the mistake
            return int(x)
        left = np.maximum(rho - qk, 0.0)
        rho = left / left.sum() if left.sum() > 0 else rho
    return int(rng.choice(len(rho), p=rho))
