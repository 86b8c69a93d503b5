"""From logits to the distribution we sample from: temperature, top-k, top-p — applied once.

`sampling_probs` is the single place where a model's logits become a probability vector. The
speculative verify rule needs p (target) and q (draft) to be *exactly* the laws the tokens are
drawn from, so every sampler in nanospec calls this function and nothing else.

Order (as in Hugging Face and vLLM): divide by the temperature, keep the top-k tokens, keep the
smallest top-ranked set whose mass reaches top-p, renormalise. Greedy (temperature 0) is the
one-hot distribution on the argmax — not a division by zero, and not a limit.

Worked example: logits [2, 1, 0, -1], T = 1 -> probs [.644 .237 .087 .032];
top_k = 2 -> [.731 .269 0 0]; then top_p = 0.7 -> [1 0 0 0] (.731 alone already reaches 0.7).

Ties at a cut-off are all kept (a token exactly as likely as the k-th one survives too): the law
stays a deterministic function of the logits, which is all exactness needs.

The cut is looked for among the `SHORTLIST` (256) likeliest tokens (`jax.lax.top_k`) rather than
by sorting the whole vocabulary, which for GPT-2's 50,257 tokens costs more than everything
else in the law (on a CPU, some 40 times a top_k of 256). Only a row whose cut lies past the
shortlist needs the sort, inside a real branch that a batch takes only when some row needs it.
Worked example, V = 50,257: top_k = 50 keeps the tokens at least as likely as the 50th of the
shortlist; top_p = 0.9 on a peaked law whose top 12 tokens hold 0.9 of the mass finds its cut
at the 12th; top_k = 1000, or top_p = 0.9 on a law so flat that 0.9 takes thousands of tokens,
sorts. The law is the same either way.

All three settings are *traced* values, so changing them never recompiles a jitted loop.

vLLM's `min_tokens` rides along (`min_new`, `held`): before a row has generated `min_new`
tokens, its `held` tokens (EOS and the stop ids) are taken out of the logits first, so the law
is the target's *given* that the text goes on. The target's laws pass `made` (how many tokens
were generated before each position) to `sampling_probs`; a draft's law may leave the hold
out, since the verify rule needs only the law a draft was drawn from (a held draft is then
always rejected: its p is 0).

What this file deliberately leaves out: repetition penalties, min-p, logit bias.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class SamplingParams(NamedTuple):
    temperature: jax.Array  # () float32; 0 means greedy
    top_k: jax.Array  # () int32; 0 means no top-k cut
    top_p: jax.Array  # () float32 in (0, 1]; 1 means no top-p cut
    min_new: jax.Array | None = None  # () int32: no `held` token before this many new ones
    held: jax.Array | None = None  # (V,) bool: the tokens min_new holds back (None: no hold)

    @classmethod
    def make(
        cls,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_new: int = 0,
        held=None,
    ) -> "SamplingParams":
        """With `held` (a (V,) bool mask), those tokens are impossible until `min_new` tokens
        were generated; without it there is no hold at all (and nothing computed for one)."""
        # numpy scalars, not jax arrays: building settings (GREEDY below, at import) must not
        # start a JAX backend; jit takes them as traced inputs all the same.
        hold = (None, None) if held is None else (np.int32(min_new), np.asarray(held, bool))
        return cls(np.float32(temperature), np.int32(top_k), np.float32(top_p), *hold)

    def repeat(self, n: int) -> "SamplingParams":
        """Settings per row (the serving engine's), each row's repeated for n rows in a row
        (SSD's branches of one request); shared settings stay as they are."""
        return (
            self
            if self.temperature.ndim == 0
            else SamplingParams(*(None if x is None else jnp.repeat(x, n, axis=0) for x in self))
        )

    def per_row(self, n: int) -> "SamplingParams":
        """Shared settings as n rows of the same setting (the serving engine's form)."""
        return SamplingParams(
            *(None if x is None else jnp.broadcast_to(x, (n,) + x.shape) for x in self)
        )


GREEDY = SamplingParams.make(temperature=0.0)


# How many of the likeliest tokens the cut is first looked for among (jax.lax.top_k) before a
# sort of the whole vocabulary. 256 holds every top-k people use (40, 50, 100) and, on a trained
# model's peaked law, most top-p cuts, while costing a fraction of sorting GPT-2's 50,257.
SHORTLIST = 256


def _truncate(probs: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Zero out everything outside the top-k / top-p set and renormalise. probs: (..., V)."""
    V = probs.shape[-1]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, V), V)  # V: no top-k cut
    desc = jax.lax.top_k(probs, min(SHORTLIST, V))[0]  # (..., S) the likeliest, largest first
    threshold, fits = _cut(probs, desc, k, top_p)  # (..., 1) each

    def sort_path(threshold):
        full = -jnp.sort(-probs, axis=-1)  # (..., V) largest first
        # subtle: a row the shortlist was enough for keeps that threshold here too, so its law
        # never depends on whether another row in the batch needed the sort.
        return jnp.where(fits, threshold, _cut(probs, full, k, top_p)[0])

    threshold = jax.lax.cond(jnp.all(fits), lambda t: t, sort_path, threshold)
    kept = jnp.where(probs >= threshold, probs, 0.0)  # ties at the cut are all kept
    return kept / jnp.sum(kept, axis=-1, keepdims=True)


def _cut(probs: jax.Array, desc: jax.Array, k: jax.Array, top_p: jax.Array):
    """The smallest kept probability (..., 1), from desc (..., n): the n largest of probs
    (..., V), largest first, n <= V; and, per row, whether those n were enough to find it.

    k is the top-k cut in 1..V (V: none). With top_p = .5 and probs [.4 .3 .2 .1], desc [.4 .3]:
    the mass before each is [0 .4] (< .5: both kept), and the cut may lie past .3, so the row
    does not fit. With top_p = .4, [0 .4] keeps only .4 (threshold .4) and the row fits."""
    V, n = probs.shape[-1], desc.shape[-1]
    in_top_k = jnp.arange(n) < k  # (..., n)
    kept_mass = jnp.sum(jnp.where(in_top_k, desc, 0.0), axis=-1, keepdims=True)  # (..., 1)
    if n < V:  # no top-k cut: top-p's mass is all of it, no sort needed
        kept_mass = jnp.where(k < V, kept_mass, jnp.sum(probs, axis=-1, keepdims=True))
    # Mass strictly before each sorted token, measured inside the top-k set. top_p = 1 is no cut
    # at all, not a comparison: the rounded cumsum can reach 1 before the far tail does.
    before = (jnp.cumsum(desc, axis=-1) - desc) / kept_mass  # (..., n)
    keep_sorted = in_top_k & ((before < top_p) | (top_p >= 1))  # always keeps the top token
    n_keep = jnp.sum(keep_sorted, axis=-1, keepdims=True)  # (..., 1)
    threshold = jnp.take_along_axis(desc, n_keep - 1, axis=-1)  # (..., 1)
    no_cut = (k >= V) & (top_p >= 1)
    threshold = jnp.where(no_cut, -jnp.inf, threshold)  # (..., 1)
    # A top-k cut of at most n fits. A larger one needs the sort even for its top-p part: that
    # mass is the top k's. With no top-k cut, a row fits when it has no cut at all or when the
    # mass before a token inside desc already reaches top_p. A tie run across the end of desc
    # needs nothing more: the threshold is a value, and `probs >= threshold` keeps the whole run.
    fits = (k <= n) | ((k >= V) & (no_cut | (n_keep < n)))  # (..., 1)
    return threshold, fits


def sampling_probs(logits: jax.Array, params: SamplingParams, made=None) -> jax.Array:
    """logits (..., V) -> the probability vector (..., V) that sampling draws from.

    `params` holds one setting for every row, or (the serving engine) a setting per row:
    fields of shape (B,) for logits (B, ..., V); row b's law is then exactly the law its own
    settings give alone. `made` (broadcast to logits.shape[:-1]): the tokens generated before
    each position, for the settings' min_new hold; left out, nothing is held."""
    if params.held is not None and made is not None:
        logits = hold(logits, params, made)
    if params.temperature.ndim:
        return _rows_law(logits.astype(jnp.float32), params)
    # subtle: a real branch on a scalar: greedy decoding skips the softmax and the top-k/top-p
    # machinery altogether: on a CPU, a third of a draft step's sampling (the timings:
    # docs/results.md, "Why the code is shaped as it is").
    return jax.lax.cond(
        params.temperature > 0, _sampled_law, _greedy_law, logits.astype(jnp.float32), params
    )


def hold(logits: jax.Array, params: SamplingParams, made) -> jax.Array:
    """vLLM's min_tokens: the held tokens' logits set to −∞ at every position with fewer than
    min_new tokens made before it — before the temperature and the cuts, as vLLM does, so a
    top-k of 1 picks the likeliest token that is not held.

    Worked example: min_new 2, EOS held, a chain round from 1 token made: its positions have 1,
    2, 3, ... made before them, so EOS is impossible at the first and possible from the second.
    """
    made = jnp.broadcast_to(made, logits.shape[:-1])
    per_row = params.min_new.ndim > 0
    lift = (
        (lambda x: x.reshape(x.shape[:1] + (1,) * (made.ndim - 1) + x.shape[1:]))
        if per_row
        else (lambda x: x)
    )
    early = made < lift(params.min_new)  # logits.shape[:-1]
    # subtle: a real branch on "any position held" keeps a server's steps, whose rows always
    # carry the (mostly zero) hold, from paying a select over every logit.
    return jax.lax.cond(
        jnp.any(early),
        lambda x: jnp.where(early[..., None] & lift(params.held), -jnp.inf, x),
        lambda x: x,
        logits,
    )


def _rows_law(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """sampling_probs with settings per row: the same arithmetic, row by row, as one setting."""
    shape = (logits.shape[0],) + (1,) * (logits.ndim - 1)
    t, k, p = (x.reshape(shape) for x in params[:3])
    greedy = _greedy_law(logits, params)
    # subtle: scalar predicates (any row) keep these real branches, as in sampling_probs; a row
    # outside them takes its own law from the jnp.where, so no row depends on another's.
    soften = lambda x: jax.nn.softmax(x / jnp.where(t > 0, t, 1), axis=-1)
    probs = jax.lax.cond(jnp.any(t > 0), soften, lambda x: greedy, logits)
    cut = (k > 0) | (p < 1.0)
    probs = jnp.where(
        cut, jax.lax.cond(jnp.any(cut), _truncate, lambda x, *_: x, probs, k, p), probs
    )
    return jnp.where(t > 0, probs, greedy)


def _greedy_law(logits: jax.Array, params: SamplingParams) -> jax.Array:
    """Temperature 0: the one-hot distribution on the argmax (the first one, on ties)."""
    return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)


def _sampled_law(logits: jax.Array, params: SamplingParams) -> jax.Array:
    probs = jax.nn.softmax(logits / params.temperature, axis=-1)
    needs_cut = (params.top_k > 0) | (params.top_p < 1.0)
    # subtle: a scalar predicate keeps this a real branch (no sort) even under vmap over rows.
    return jax.lax.cond(needs_cut, _truncate, lambda p, k, q: p, probs, params.top_k, params.top_p)


def sample(key: jax.Array, probs: jax.Array) -> jax.Array:
    """Draw one token id from probs (..., V) by inverting the CDF with a single uniform.

    The token is the first index whose cumulative probability exceeds u·total, u ~ U[0, 1):
    with probs [.5, 0, .5] the CDF is [.5, .5, 1]; u·total = .7 gives index 2. A zero-
    probability token has a zero-width step, so it is never drawn. One random number per draw
    (Gumbel-max would need V of them) halves the cost of a draft step on a CPU.
    """
    cdf = jnp.cumsum(probs, axis=-1)  # (..., V)
    u = jax.random.uniform(key, probs.shape[:-1] + (1,)) * cdf[..., -1:]  # (..., 1)
    return jnp.sum(cdf <= u, axis=-1).astype(jnp.int32)


def sample_rows(key: jax.Array, probs: jax.Array) -> jax.Array:
    """Independent draws for each row of probs (B, V), row b using fold_in(key, b).

    Keying by row index (not by batch shape) makes row b's draw the same whatever else is
    in the batch — the property batched speculation must keep.
    """
    return jax.vmap(sample)(row_keys(key, probs.shape[0]), probs)


def row_keys(key: jax.Array, batch: int) -> jax.Array:
    """One key per row: fold_in(key, b), so row b's randomness ignores the batch size.

    The serving engine gives every row its own key instead (a (R,) key array, one request
    each: serving/engine.py). Then the batch is R requests of `batch // R` rows each (SSD's
    branches), and row b of request r uses fold_in(key[r], b) — the key it would use alone.
    """
    if key.ndim == 0:
        return jax.vmap(lambda b: jax.random.fold_in(key, b))(jnp.arange(batch))
    per = batch // key.shape[0]
    return jax.vmap(lambda b: jax.random.fold_in(key[b // per], b % per))(jnp.arange(batch))


def fold_keys(key: jax.Array, data) -> jax.Array:
    """jax.random.fold_in for one key, or for a key per row (R,) with `data` () or (R,)."""
    if key.ndim == 0:
        return jax.random.fold_in(key, data)
    return jax.vmap(jax.random.fold_in)(key, jnp.broadcast_to(data, key.shape))


def split_keys(key: jax.Array, n: int) -> jax.Array:
    """jax.random.split for one key (n,), or for a key per row: (n, R), so keys[i] is step
    i's key for every row either way."""
    if key.ndim == 0:
        return jax.random.split(key, n)
    return jnp.moveaxis(jax.vmap(lambda k: jax.random.split(k, n))(key), 0, 1)
