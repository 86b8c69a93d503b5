"""Exercise 8 — SpecInfer's walk over sibling drafts.

A token tree gives one position several candidate tokens (siblings), and the target may keep
at most one. SpecInfer's multi-draft rejection sampling tries them in order, with r (the law
still owed to the target) starting as p:

1. accept candidate k (token x_k, drawn from the law q[k]) with probability
   min(1, r(x_k) / q[k](x_k)) — one uniform per candidate from `rng.random()`;
2. rejected: r ← norm(max(0, r − q[k])), and try the next sibling;
3. every sibling rejected: draw the token from the final r.

Return the token that comes out (an accepted candidate, or the final draw). Its law is exactly
p whenever each candidate was drawn from its q[k] independently of the earlier ones.

    p = [.5 .3 .2], candidates [0, 1] with point-mass laws q = [[1 0 0], [0 1 0]]:
    0 accepted with .5; rejected -> r = [0 .6 .4]; 1 accepted with .6; rejected -> r = [0 0 1].
    P(0) = .5, P(1) = .5 · .6 = .3, P(2) = .5 · .4 = .2: exactly p.

Write it with numpy (`rng.choice(V, p=law)` draws a token); the checker calls it often.

Check it:   nanospec exercise check 8
Read after: nanospec/trees/tree.py (`sibling_laws`, `verify_tree_row`), lesson 15.
"""

import numpy as np


def verify_siblings(
    rng: np.random.Generator, candidates: np.ndarray, q: np.ndarray, p: np.ndarray
) -> int:
    """candidates (K,) ints; q (K, V) the law each was drawn from; p (V,) the target's law."""
    raise NotImplementedError("write verify_siblings")
