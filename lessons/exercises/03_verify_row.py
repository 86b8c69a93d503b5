"""Exercise 3 — verify one round of γ drafts.

The draft proposed x_1..x_γ, drawing x_i from q[i]; one target pass gave p[0..γ] (γ + 1
laws: p[i] is the target's law for the token at draft position i, and p[γ] the law of the
token after all γ drafts). Implement the whole verify rule:

1. left to right, accept x_i with probability min(1, p[i](x_i) / q[i](x_i)) — draw one
   uniform per draft from `rng` (`rng.random()`); stop at the first rejection;
2. if x_{n+1} was rejected, draw the replacement token from norm(max(0, p[n] − q[n]));
3. if all γ were accepted, draw a bonus token from p[γ].

Return (n_accepted, token): how many drafts were accepted (0..γ) and the extra token. The
round emits x_1..x_n and then `token`, so it always makes progress.

    drafts = [2, 0], q = [[.1 .1 .8], [.5 .5 0]], p = [[.1 .1 .8], [.5 .5 0], [0 0 1]]
    p == q everywhere, so both drafts are always accepted and the bonus is token 2:
    verify_row(rng, drafts, q, p) == (2, 2)

Draw random tokens with `rng.choice(V, p=law)`. Write it with numpy: the checker calls it
tens of thousands of times.

Check it:   nanospec exercise check 3
Read after: nanospec/verify.py (`verify_row`), lessons 04 and 07.
"""

import numpy as np


def verify_row(
    rng: np.random.Generator, drafts: np.ndarray, q: np.ndarray, p: np.ndarray
) -> tuple[int, int]:
    """drafts (γ,) ints; q (γ, V) the draft's laws; p (γ + 1, V) the target's laws.
    Returns (n_accepted, token)."""
    raise NotImplementedError("write verify_row")
