"""Exercise 8 — SpecInfer's walk over sibling drafts.

A token tree gives one position several candidate tokens (siblings), and the target may keep
at most one. SpecInfer's multi-draft rejection sampling tries them in order, keeping ρ (`rho`
in code), the law still owed to the target, which starts as p:

1. accept candidate k (token x_k = candidates[k], drawn from the law q[k]) with probability
   min(1, ρ(x_k) / q[k](x_k)) — one uniform per candidate from `rng.random()`;
2. rejected: ρ ← norm(max(0, ρ − q[k])), the residual, and try the next sibling;
3. every sibling rejected: draw the token from the final ρ.

Return the token that comes out: the accepted candidate's token x_k (not its index k), or the
final draw. Its law is exactly p whenever each candidate was drawn from its q[k]
independently of the earlier ones.

    p = [.5 .3 .2], candidates [0, 1] with point-mass laws q = [[1 0 0], [0 1 0]]:
    0 accepted with .5; rejected -> ρ = [0 .6 .4]; 1 accepted with .6; rejected -> ρ = [0 0 1].
    P(0) = .5, P(1) = .5 · .6 = .3, P(2) = .5 · .4 = .2: exactly p.

Write it with numpy (`rng.choice(V, p=law)` draws a token): the checker calls it 10,000
times for each of its three cases.

Check it:   nanospec exercise check 8
Read after: nanospec/trees/tree.py (`sibling_laws`, whose `rhos[k]` is ρ_k, the law sibling k
is tested against; `verify_tree_row`), lesson 15.
"""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    """candidates (K,) ints; q (K, V) the law each was drawn from; p (V,) the target's law."""
    raise NotImplementedError("write verify_siblings")
