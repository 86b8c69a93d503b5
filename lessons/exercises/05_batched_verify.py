"""Exercise 5 — how many drafts each row accepts, in JAX, for a whole batch.

A batch verifies B rows at once, each with γ draft slots. Row b proposed only its first
n_draft[b] drafts (a drafter may propose fewer: prompt lookup with no match proposes none);
the other slots are padding, and padding is never accepted, whatever its uniform says.
A draft is accepted when u·q(x) < p(x) (exercise 2's test), and a row keeps only the LEADING
run of accepted drafts: everything after its first rejection is discarded.

Implement `accepted_counts` for the whole batch with jax.numpy, so that it runs inside
jax.jit (the checker calls it that way) and so inside the loop's `lax.while_loop`: no Python
`if` or `while` on an array's value, no `int(...)`, and jax.numpy, not numpy, on the arrays
(numpy would ask for their values; on their shapes, as in np.arange(u.shape[1]), it is fine).
The trick is a cumulative product along the row: [1 1 0 1] -> [1 1 0 0], whose sum is the
run's length.

    u   = [[.5 .5 .5], [.5 .5 .5]]      q_x = 1 everywhere
    p_x = [[.9 .2 .9], [.9 .9 .9]]      n_draft = [3, 2]
    row 0: accepted, rejected, accepted -> the run stops at the rejection: 1
    row 1: accepted, accepted, and a padding slot that never counts: 2
    accepted_counts(u, p_x, q_x, n_draft) == [1, 2]

Check it:   nanospec exercise check 5
Read after: nanospec/verify.py (`leading_run`; `verify_row`, whose `n_draft` marks where
the padding starts; `verify`, the batch), and lesson 07 for the loop these counts feed (one
row there).
"""

import jax.numpy as jnp


def accepted_counts(
    u: jnp.ndarray, p_x: jnp.ndarray, q_x: jnp.ndarray, n_draft: jnp.ndarray
) -> jnp.ndarray:
    """u, p_x, q_x: (B, γ) floats; n_draft: (B,) ints in 0..γ. Returns (B,) int32 counts."""
    raise NotImplementedError("write accepted_counts")
