"""Exercise 5, a reference solution (try it yourself first: ../05_batched_verify.py)."""

import jax.numpy as jnp


def accepted_counts(u, p_x, q_x, n_draft):
    gamma = u.shape[1]
    proposed = jnp.arange(gamma)[None, :] < n_draft[:, None]  # (B, γ): padding is False
    accepted = (u * q_x < p_x) & proposed  # (B, γ)
    run = jnp.cumprod(accepted.astype(jnp.int32), axis=1)  # 1 until the first rejection
    return jnp.sum(run, axis=1)  # (B,)
