"""Exercise 5, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: count every accepted draft in the row instead of the leading run. A round stops
at its first rejection: the drafts after it were drawn as a continuation of a token that is
not in the text, so accepting them would write tokens the target never vetted there.
"""

import jax.numpy as jnp


def accepted_counts(u, p_x, q_x, n_draft):
    gamma = u.shape[1]
    proposed = jnp.arange(gamma)[None, :] < n_draft[:, None]
    accepted = (u * q_x < p_x) & proposed
    return jnp.sum(accepted.astype(jnp.int32), axis=1)  # every accept, not the run: the mistake
