"""What one engine step runs, and how a request's row enters the batch (serving/engine.py).

- `step_loops`: the loop a step runs at each γ (one, without a policy), all over one cache
  capacity so that they share one state;
- `round_at`: a speculative round over every row (`one_round`), or at γ = 0 a plain one
  (serving/adaptive.plain_round);
- `redraft`: the proposer's state rebuilt from the committed text, when drafting resumes;
- `put_row`: a batch-1 state (a prefilled request) copied into one row of the batch.
"""

from dataclasses import replace
from functools import partial

import jax
import jax.numpy as jnp

from nanospec.cache import capacity as cache_capacity
from nanospec.errors import UserError
from nanospec.serving.adaptive import plain_round


def put_row(rows, one, at):
    """Every leaf of a batch state `rows` with row `at` replaced by the batch-1 state `one`.

    A leaf's batch axis is the axis where the two shapes differ (a cache may keep its layers
    first), and a row's entries along it are as many as `one` has there: 1, or a cache
    buffer's H heads (cache.py); a scalar of `one` (its key, its round counter) is that row's
    entry of a per-row vector; with one slot the shapes agree and the whole leaf is replaced."""

    def leaf(all_, x):
        x = x.reshape((1,) * (all_.ndim - x.ndim) + x.shape)
        axis = next((i for i, (a, b) in enumerate(zip(all_.shape, x.shape)) if a != b), None)
        if axis is None:
            return x
        return jax.lax.dynamic_update_slice_in_dim(all_, x, at * x.shape[axis], axis)

    return jax.tree.map(leaf, rows, one)


def one_round(spec, p, dp, state, sp, max_new):
    """A round of `spec` over every row -> (state, drafts proposed, drafts accepted), per row."""
    state, trace = spec.step(p, dp, state, sp, max_new)
    live, drafted, accepted, *_ = trace.counts()
    return state, jnp.where(live, drafted, 0), jnp.where(live, accepted, 0)


def cache_size_for(n_ctx: int, block: int) -> int:
    """Cache positions for a row of up to `n_ctx` tokens (the engine's max_len): cache.capacity,
    rounded up to a multiple of 16. subtle: a step over 260 positions (256 + a γ = 4 block's
    slack) cost more than one over 256 or 272 — XLA's CPU kernels like round sizes (docs/results.md,
    "Why the code is shaped as it is")."""
    return -(-cache_capacity(n_ctx, n_ctx, 0, block) // 16) * 16


def step_loops(loop, policy, max_len: int | None = None) -> dict:
    """{γ: the loop a step at γ runs}: the loop itself without a policy (key None); with one,
    the chain speculator at each γ it may choose (γ = 0: the largest, which plain_round runs
    without drafts), all with one cache capacity (for `max_len` tokens, default the whole
    context) so that they share one state."""
    n_ctx = max_len or loop.cfg.n_ctx
    if policy is None:
        return {None: replace(loop, shared=False, capacity=cache_size_for(n_ctx, loop.block))}
    if loop.drafter is None or not loop.proposer.gamma_can_change:
        raise UserError(
            "Adaptive speculation needs chain drafting by the draft model or "
            "prompt lookup (--method draft or ngram)."
        )
    top = max(policy.gammas)
    return {
        g: replace(loop, shared=False, capacity=cache_size_for(n_ctx, top + 1), gamma=g or top)
        for g in sorted(set(policy.gammas) | {top})
    }


def round_at(gamma, spec):
    """The function a step at `gamma` runs: a round of `spec`, or (γ = 0) a plain one."""
    return partial(plain_round if gamma == 0 else one_round, spec)


def redraft(spec, dparams, state):
    """The proposer's state rebuilt from every row's committed text, in one pass (the draft
    model's cache; prompt lookup has none): how drafting resumes after plain steps
    (`adaptive.plain_round`), which left it behind."""
    n_ctx = spec.cfg.n_ctx
    return state._replace(
        dstate=spec.proposer.resync(
            dparams, state.dstate, state.seq[:, :n_ctx], state.length, spec.cache_size
        )
    )
