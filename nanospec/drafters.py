"""Drafters: the cheap guessers that propose γ tokens for the target to verify.

Every drafter implements one small protocol (and is a frozen dataclass, so it is hashable and
can be a static argument of jit; its weights travel separately as `dparams`):

    init(dparams, tokens, lengths)                   -> dstate
    propose(dparams, dstate, seq, length, key, sp, γ) -> drafts (B, γ), q (B, γ, V), dstate

`seq` (B, S) holds the committed tokens, `length` (B,) how many per row. `q[b, i]` must be
*exactly* the law drafts[b, i] was drawn from — the verify rule's exactness rests on it. A
deterministic drafter returns one-hot rows (a point mass). The drafter keeps whatever state it
likes (a KV cache, an index) and must cope with any number of its drafts being rejected: the
committed `length` it is given next time is the truth.

What this file deliberately leaves out (for now): trees of candidates, drafters that read the
target's hidden features (EAGLE, Medusa) — they extend the same protocol.
"""

from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from nanospec.cache import KVCache, init_cache, rollback
from nanospec.model import ModelConfig, forward
from nanospec.sampling import SamplingParams, sample_rows, sampling_probs


class Drafter(Protocol):
    name: str

    def init(self, dparams, tokens: jax.Array, lengths: jax.Array) -> Any: ...

    def propose(self, dparams, dstate, seq: jax.Array, length: jax.Array, key: jax.Array,
                sp: SamplingParams, gamma: int) -> tuple[jax.Array, jax.Array, Any]: ...


def take_rows(seq: jax.Array, start: jax.Array, width: int) -> jax.Array:
    """seq[b, start[b] : start[b] + width] for every row b: (B, width)."""
    return jax.vmap(lambda row, s: jax.lax.dynamic_slice(row, (s,), (width,)))(seq, start)


@dataclass(frozen=True)
class DraftModel:
    """A small separate language model sampled autoregressively γ times per round.

    Cache invariant: the draft's KV cache holds every committed token except the last two.
    Each round starts by feeding it those two tokens as one block. That re-writes one cached
    token (same value, harmless) and — the subtle part — after a round where all γ drafts
    were accepted it catches up x_γ, the draft's own last token, which it sampled but never
    fed to itself. Fixed shapes, no branch: every round looks the same.
    """

    graphdef: Any
    cfg: ModelConfig
    name: str = "draft"

    def init(self, dparams, tokens, lengths) -> KVCache:
        c = self.cfg
        B, Lb = tokens.shape
        cache = init_cache(c.n_layer, c.n_head, c.head_dim, B, c.n_ctx)
        positions = jnp.broadcast_to(jnp.arange(Lb), (B, Lb))
        _, _, cache = forward(self.graphdef, dparams, tokens, positions, cache)
        return rollback(cache, lengths - 2)

    def propose(self, dparams, cache, seq, length, key, sp, gamma):
        cache = rollback(cache, length - 2)
        last_two = take_rows(seq, length - 2, 2)  # (B, 2)
        positions = (length - 2)[:, None] + jnp.arange(2)  # (B, 2)
        logits, _, cache = forward(self.graphdef, dparams, last_two, positions, cache)
        keys = jax.random.split(key, gamma)
        q1 = sampling_probs(logits[:, -1], sp)  # (B, V)
        x1 = sample_rows(keys[0], q1)  # (B,)

        def draft_one(carry, i_and_key):  # feed draft i, sample draft i + 1
            cache, x = carry
            i, k = i_and_key
            logits, _, cache = forward(self.graphdef, dparams, x[:, None],
                                       (length - 1 + i)[:, None], cache)
            q = sampling_probs(logits[:, 0], sp)  # (B, V)
            x_next = sample_rows(k, q)  # (B,)
            return (cache, x_next), (x_next, q)

        (cache, _), (xs, qs) = jax.lax.scan(draft_one, (cache, x1), (jnp.arange(1, gamma), keys[1:]))
        drafts = jnp.concatenate([x1[:, None], xs.T], axis=1)  # (B, γ)
        q = jnp.concatenate([q1[:, None], jnp.moveaxis(qs, 0, 1)], axis=1)  # (B, γ, V)
        return drafts, q, cache
