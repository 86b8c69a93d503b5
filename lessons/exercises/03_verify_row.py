"""Exercise 3 — verify one round of γ drafts.

The draft proposed γ tokens, drafts[0], …, drafts[γ − 1], drawing drafts[i] from the law
q[i]; one target pass gave γ + 1 laws p[0], …, p[γ]: p[i] is the target's law at drafts[i]'s
position (given the text and drafts[0..i − 1]), and p[γ] the law of the token after all γ
drafts. Everything here is counted from 0, as the arrays are: p[i] and q[i] here are the
p_{i+1} and q_{i+1} of the lessons and of nanospec/verify.py (whose drafts are x₁ … x_γ), and
p[γ] is their p_{γ+1}. Implement the whole verify rule:

1. for i = 0, 1, …: accept drafts[i] with probability min(1, p[i][x] / q[i][x]), where
   x = drafts[i] — draw one uniform per draft from `rng` (`rng.random()`); stop at the first
   rejection;
2. if drafts[n] was rejected (so drafts[0..n − 1] were accepted), draw the replacement token
   from norm(max(0, p[n] − q[n]));
3. if all γ were accepted (n = γ), draw a bonus token from p[γ].

Return (n_accepted, token): n, how many drafts were accepted (0..γ), and the extra token. The
round emits drafts[0], …, drafts[n − 1] and then `token`, so it always makes progress.

    drafts = [2, 0], q = [[.1 .1 .8], [.5 .5 0]], p = [[.1 .1 .8], [.5 .5 0], [0 0 1]]
    p[0] == q[0] and p[1] == q[1], so both drafts are always accepted and the bonus is token 2:
    verify_row(rng, drafts, q, p) == (2, 2)

Draw random tokens with `rng.choice(V, p=law)`. Write it with numpy: the checker calls it
about 10,000 times.

Check it:   nanospec exercise check 3
Read after: nanospec/verify.py (`verify_row`), lessons 04–07.
"""

import numpy as np


def verify_row(
    rng: np.random.Generator, drafts: np.ndarray, q: np.ndarray, p: np.ndarray
) -> tuple[int, int]:
    """drafts (γ,) ints; q (γ, V) the draft's laws; p (γ + 1, V) the target's laws.
    Returns (n_accepted, token)."""
    raise NotImplementedError("write verify_row")
