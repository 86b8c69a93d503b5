"""The verify rule of speculative sampling — the few lines that make speculation exact.

Given γ drafted tokens x₁..x_γ, the draft's law qᵢ for each (the vector each xᵢ was drawn from)
and the target's law pᵢ at each of the γ+1 positions (one target pass over the block):

1. accept xᵢ with probability min(1, pᵢ(xᵢ) / qᵢ(xᵢ)), left to right, stopping at the first
   rejection (`accept_reject`);
2. at the first rejection, position n+1, draw a replacement from the *residual*
   norm(max(0, p_{n+1} − q_{n+1})) (`residual`);
3. if all γ were accepted, draw a *bonus* token from p_{γ+1} — free, the target computed it.

Why it is exact: a token y comes out at a position either by being drafted and accepted,
q(y)·min(1, p(y)/q(y)) = min(q(y), p(y)), or by rejection then residual,
(1 − Σ_z min(q(z), p(z))) · max(0, p(y) − q(y)) / Σ_z max(0, p(z) − q(z)). The two bracketed sums
are equal, so the second term is max(0, p(y) − q(y)), and min(q, p) + max(0, p − q) = p(y).

Worked example: p = [.6 .4], q = [.9 .1], draft x = 0. Accept with .6/.9 = 2/3. Rejected (1/3 of
the time) -> residual max(0, p − q) = [0 .3] -> token 1. Total P(0) = .9·2/3 = .6 = p(0). ✓

Deterministic drafters (prompt lookup, argmax heads) propose with a point mass, q = one-hot(x):
the same formulas then accept with p(x) and resample from p with x removed. Greedy decoding is
p and q both one-hot: accept iff the draft equals the target's argmax, else emit that argmax.

Fixed shapes, no host sync: the first rejection is found by mask arithmetic (a cumulative
product), so this runs inside jit and inside a `lax.while_loop`.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from nanospec.sampling import row_keys, sample


class Verdict(NamedTuple):
    """One row's verdict (`verify` adds a leading batch axis B). In vLLM's words, the round
    emits the `n_accepted` *accepted* tokens, then `token`: the *recovered* token (drawn from
    the residual at the first rejection) or the *bonus* token (every draft accepted)."""

    n_accepted: jax.Array  # () int32: length of the leading run of accepted drafts, 0..γ
    accepted: jax.Array  # (γ,) bool: position i accepted AND every earlier one too
    token: jax.Array  # () int32: the recovered (from the residual) or bonus token that follows
    is_bonus: jax.Array  # () bool: every draft accepted, so `token` came from p_{γ+1}
    u: jax.Array  # (γ,) the uniforms that decided each draft
    p_x: jax.Array  # (γ,) target probability of each drafted token
    q_x: jax.Array  # (γ,) draft probability of each drafted token
    extra_probs: jax.Array  # (V,) the law `token` was drawn from (residual or p_{γ+1})


def accept_reject(u: jax.Array, p_x: jax.Array, q_x: jax.Array) -> jax.Array:
    """Accept each draft with probability min(1, p(x)/q(x)): u < p/q with u ~ U[0, 1).

    >>> accept_reject(jnp.array([.5, .5]), jnp.array([.6, .1]), jnp.array([.9, .4])).tolist()
    [True, False]
    """
    # subtle: comparing u·q < p avoids dividing by q; q(x) > 0 whenever x was drawn from q.
    return u * q_x < p_x


def residual(p: jax.Array, q: jax.Array) -> jax.Array:
    """norm(max(0, p − q)) over the last axis — where the draft under-proposed.

    If p == q the residual is empty, but then every draft is accepted and it is never used;
    returning p keeps the arithmetic finite.
    """
    r = jnp.maximum(p - q, 0.0)
    total = jnp.sum(r, axis=-1, keepdims=True)
    return jnp.where(total > 0, r / jnp.where(total > 0, total, 1.0), p)


def leading_run(accepted: jax.Array) -> jax.Array:
    """How many drafts are accepted before the first rejection: [1 1 0 1] -> 2."""
    return jnp.sum(jnp.cumprod(accepted.astype(jnp.int32), axis=-1), axis=-1)


def verify_row(
    key: jax.Array, drafts: jax.Array, q: jax.Array, p: jax.Array, n_draft: jax.Array | None = None
) -> Verdict:
    """Run the verify rule on one round of one row.

    drafts (γ,) int32; q (γ, V) the draft's laws; p (γ+1, V) the target's laws. `n_draft` ()
    (default γ): only the first n_draft drafts were proposed — the rest are padding, never
    accepted — and the bonus comes from p_{n_draft+1}. n_draft = 0 is an ordinary decode
    step: the token is drawn from p₁. Exact for any n_draft the drafter fixed before the
    target was consulted: each proposed position is judged by the same rule, and the rule
    never needed γ to be a constant.
    """
    gamma = drafts.shape[0]
    n_draft = gamma if n_draft is None else n_draft
    key_u, key_extra = jax.random.split(key)
    p_x = p[jnp.arange(gamma), drafts]  # (γ,)
    q_x = q[jnp.arange(gamma), drafts]  # (γ,)
    u = jax.random.uniform(key_u, (gamma,))
    proposed = jnp.arange(gamma) < n_draft  # (γ,)
    n = leading_run(accept_reject(u, p_x, q_x) & proposed)  # () int32, <= n_draft
    accepted = jnp.arange(gamma) < n  # (γ,)

    is_bonus = n == n_draft
    q_at_n = q[jnp.minimum(n, gamma - 1)]  # (V,) only used when n < n_draft
    extra_probs = jnp.where(is_bonus, bonus_probs(p, n), residual(p[n], q_at_n))  # (V,)
    token = sample(key_extra, extra_probs)
    return Verdict(n, accepted, token, is_bonus, u, p_x, q_x, extra_probs)


def verify(
    key: jax.Array, drafts: jax.Array, q: jax.Array, p: jax.Array, n_draft: jax.Array | None = None
) -> Verdict:
    """`verify_row` for a batch: drafts (B, γ), q (B, γ, V), p (B, γ+1, V), n_draft (B,).

    Row b uses fold_in(key, b), so its verdict does not depend on the rest of the batch.
    """
    B, gamma = drafts.shape
    n_draft = jnp.full((B,), gamma, jnp.int32) if n_draft is None else n_draft
    return jax.vmap(verify_row)(row_keys(key, B), drafts, q, p, n_draft)


def bonus_probs(p: jax.Array, n_accepted) -> jax.Array:
    """The law of the bonus token, drawn when every proposed draft was accepted: the target's
    own next-token law after them, p[n_accepted] (p_{γ+1} when all γ were proposed)."""
    return p[n_accepted]
