"""The KV cache: an explicit pytree passed into the model and returned updated.

Layout: for every layer a key and a value buffer of fixed capacity S, plus one committed length
per row. A forward pass over T new tokens writes their keys/values into slots
`length[b] .. length[b] + T - 1` of row b and returns the cache with `length + T`.

A buffer is (B·H, S, Dh): row b's heads are entries b·H .. b·H + H − 1 of its first axis, each
head's slots one (S, Dh) matrix, which is how XLA:CPU's batched matmul reads them. Laid out
(B, S, H, Dh), every pass re-laid all 12 buffers out for attention; laid out (B, H, S, Dh), a
pass that writes a buffer and reads it back got it built twice, each after a whole copy. Either
way about a third of a decode step went to copying the cache (docs/results.md, "The verify
pass"). `rows` gives the (B, H, S, Dh) view where code works row by row.

Rollback is just `cache._replace(length=n)`: slots at or beyond n become stale, and stale slots
are invisible because a query only ever sees (a) committed slots `< length` and (b) slots of its
own block that the block mask allows. They are overwritten by the next write.

Branching on a cache: `run_if`, not `lax.cond` (see its docstring).

Capacity (`capacity`): the slots a run can reach — its prompt's bucket plus max_new_tokens,
at most the model's context — rounded up to a power of two, plus the width of one round's
block. A 3-token answer to a short prompt needs 32 slots, not the context's 256, which is
what lets `--num-samples 100000` fit in memory.

What this file deliberately leaves out: paging, sharing prefixes between rows, quantisation.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class KVCache(NamedTuple):
    k: tuple[jax.Array, ...]  # one per layer, each (B·H, S, Dh)
    v: tuple[jax.Array, ...]  # one per layer, each (B·H, S, Dh)
    length: jax.Array  # (B,) int32: committed tokens per row

    @property
    def capacity(self) -> int:
        return self.k[0].shape[-2]  # also for layer_scan's stacked (L, B·H, S, Dh)


def rows(buf: jax.Array, batch: int) -> jax.Array:
    """A cache buffer (B·H, S, Dh) seen as (B, H, S, Dh): one entry per row."""
    return buf.reshape(batch, -1, *buf.shape[1:])


def repeat_rows(cache: KVCache, n: int) -> KVCache:
    """Every row n times over, each next to itself: rows (a, b) -> (a, a, …, b, b, …), heads
    kept together."""
    B = cache.length.shape[0]
    again = lambda buf: jnp.repeat(rows(buf, B), n, axis=0).reshape(-1, *buf.shape[1:])
    return KVCache(
        tuple(map(again, cache.k)), tuple(map(again, cache.v)), jnp.repeat(cache.length, n)
    )


def init_cache(
    n_layer: int, n_head: int, head_dim: int, batch: int, capacity: int, dtype=jnp.float32
) -> KVCache:
    """An empty cache: zero buffers, length 0 in every row."""
    shape = (batch * n_head, capacity, head_dim)
    zeros = tuple(jnp.zeros(shape, dtype) for _ in range(n_layer))
    return KVCache(
        k=zeros,
        v=tuple(jnp.zeros(shape, dtype) for _ in range(n_layer)),
        length=jnp.zeros((batch,), jnp.int32),
    )


def capacity(n_ctx: int, prompt_width: int, max_new: int, block: int = 1) -> int:
    """Cache slots for a run: every position it can reach, plus `block - 1` slack slots.

    subtle: a round writes a fixed-width block (γ+1 tokens, or a tree) even when fewer slots
    are left before the context's end; the slack takes the block's padding there, instead of
    `dynamic_update_slice` clamping the write back onto committed slots. Nothing at or past
    the context's end is ever read. Rounding the reach up to a power of two keeps the number
    of compiled programs small (capacity is static).

    >>> capacity(256, 16, 2), capacity(256, 16, 2, block=5), capacity(256, 64, 1000)
    (32, 36, 256)
    """
    reach = min(n_ctx, prompt_width + max_new)
    rounded = 16
    while rounded < reach:
        rounded *= 2
    return min(rounded, n_ctx) + block - 1


def rollback(cache: KVCache, length: jax.Array) -> KVCache:
    """Forget everything at or after slot `length` (per row). Nothing is erased: see above."""
    return cache._replace(length=jnp.asarray(length, jnp.int32))


def run_if(pred: jax.Array, fn, carry):
    """`fn(carry) if pred else carry`, for a carry that holds a KV cache.

    subtle: `lax.cond` would be the obvious choice, but XLA copies a conditional's buffers
    that a branch updates: the whole cache, twice per call (a fifth of a decode step, measured:
    docs/results.md, "Why the code is shaped as it is"). A while
    loop that runs zero or one times updates its carry in place, so it costs nothing beyond
    `fn` itself. `fn` must return a carry of the same structure, shapes and dtypes.
    """
    body = lambda c: (jnp.zeros((), bool), fn(c[1]))
    return jax.lax.while_loop(lambda c: c[0], body, (jnp.asarray(pred, bool), carry))[1]


def write_block(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
    """Write `new` (B·H, T, Dh) into `buf` (B·H, S, Dh) at per-row slot `start` (B,).

    subtle: dynamic_update_slice clamps the start so the block fits, so a write past the
    capacity would silently land on earlier slots. Callers keep `length + T <= S`.
    """
    H = buf.shape[0] // start.shape[0]
    return write_rows(buf, lambda b, _: jax.lax.dynamic_slice_in_dim(new, b * H, H), start)


def write_rows(buf: jax.Array, block, start: jax.Array) -> jax.Array:
    """Write `block(b, buf)` (H, T, Dh) into row b of `buf` (B·H, S, Dh) from slot start[b].

    One dynamic_update_slice per row, which XLA does in place. (`vmap` of one made a scatter,
    which XLA:CPU built twice over for a pass that reads the buffer back, copying it whole.)
    """
    B = start.shape[0]
    H = buf.shape[0] // B
    put = lambda b, buf: jax.lax.dynamic_update_slice(buf, block(b, buf), (b * H, start[b], 0))
    return put(0, buf) if B == 1 else jax.lax.fori_loop(0, B, put, buf)


def attention_mask(length: jax.Array, T: int, S: int, block_mask: jax.Array | None) -> jax.Array:
    """Which cache slots each new query may see: (B, T, S) booleans.

    Query t of row b sees every committed slot s < length[b], and slot length[b] + j of its own
    block when block_mask[t, j] (default: causal, j <= t). A token tree passes its ancestor
    matrix as block_mask instead.

    Example: length = [2], T = 2, S = 5, causal ->
        t=0: [1 1 1 0 0]
        t=1: [1 1 1 1 0]
    """
    if block_mask is None:
        block_mask = jnp.tril(jnp.ones((T, T), bool))
    j = jnp.arange(S)[None, :] - length[:, None]  # (B, S) slot index relative to the block
    in_block = (j >= 0) & (j < T)
    allowed = block_mask[:, jnp.clip(j, 0, T - 1)]  # (T, B, S)
    allowed = jnp.moveaxis(allowed, 0, 1)  # (B, T, S)
    return (j < 0)[:, None, :] | (in_block[:, None, :] & allowed)
