"""Drafters: the cheap guessers that propose γ tokens for the target to verify.

Every drafter subclasses `Drafter`, the one contract the loop relies on (it never asks a
drafter what it can do any other way). Each is a frozen dataclass, so it is hashable and can be
part of a loop's static fields; its weights travel separately as `dparams`.

This file: the contract, the separate draft model, and prompt lookup (n-gram matching, no model
at all). heads/drafters.py has Medusa, EAGLE and MTP; trees/grow.py teaches drafters to grow
token trees.
"""

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from nanospec.cache import KVCache, init_cache, rollback
from nanospec.model import ModelConfig, forward
from nanospec.sampling import SamplingParams, sample_rows, sampling_probs, split_keys


class Drafter:
    """The drafter contract. Must implement: `init`, `propose`. May override: the rest.

    `seq` (B, S) holds the committed tokens, `length` (B,) how many per row; `capacity` is the
    number of slots the run's caches have (cache.capacity: enough for every round's block).
    `q[b, i]` must be *exactly* the law drafts[b, i] was drawn from — the verify rule's
    exactness rests on it. A deterministic drafter returns one-hot rows (a point mass). The
    drafter keeps whatever state it likes (a KV cache, an index) and must cope with any number
    of its drafts being rejected: the committed `length` it is given next time is the truth.

    `hidden` is what the target computed: over the padded prompt at `init`, and over the verify
    block [last, x₁..x_γ] (positions start.., `emitted[j]` is the token appended at position
    start+1+j) at `commit`, after every round. The draft model and prompt lookup ignore it;
    the heads (Medusa, EAGLE, MTP) draft from it.
    """

    name: str = "drafter"
    max_gamma: int | None = None  # the most drafts one round can hold (heads: one per head)
    varies_length: bool = False  # True if `draft_length` may propose fewer than γ
    reads_features: bool = False  # drafts from the target's `hidden` (the heads): True

    @classmethod
    def load(cls, models: dict, name: str) -> tuple["Drafter", Any]:
        """(the drafter, its own params) from the loaded checkpoints, {name: (cfg, graphdef,
        params)} (decode.Bundle), for the method called `name` (methods.py)."""
        raise NotImplementedError

    def kv_models(self) -> tuple:
        """The configs of the models whose KV cache it keeps per row (samples.plan_chunks)."""
        return ()

    def prepare(self, params, target_params) -> Any:
        """This drafter's dparams, made once at load from its own and the target's parameters."""
        return params

    def init(
        self,
        dparams,
        tokens: jax.Array,
        lengths: jax.Array,
        hidden: jax.Array,
        capacity: int | None = None,
    ) -> Any:
        """Read the padded prompt (B, Lb); return the drafter's state (dstate)."""
        raise NotImplementedError

    def propose(
        self,
        dparams,
        dstate,
        seq: jax.Array,
        length: jax.Array,
        key: jax.Array,
        sp: SamplingParams,
        gamma: int,
    ) -> tuple[jax.Array, jax.Array, Any]:
        """γ drafts (B, γ) int32, the law each was drawn from (B, γ, V), and the new dstate."""
        raise NotImplementedError

    def draft_length(self, seq: jax.Array, length: jax.Array, gamma: int) -> jax.Array:
        """How many of the γ drafts to verify this round, (B,) in 0..γ (default: all). Must
        depend only on what the drafter knows before the target is consulted; with fewer, the
        verify pass judges only those, and a round where no row proposes any is an ordinary
        decode step over one token (speculative.target_pass). Set `varies_length` to use it."""
        return jnp.full(seq.shape[:1], gamma, jnp.int32)

    def commit(
        self,
        dparams,
        dstate,
        hidden: jax.Array,
        emitted: jax.Array,
        start: jax.Array,
        length: jax.Array,
    ) -> Any:
        """See what the target saw after a round (its features, the tokens appended)."""
        return dstate


def take_rows(seq: jax.Array, start: jax.Array, width: int) -> jax.Array:
    """seq[b, start[b] : start[b] + width] for every row b: (B, width)."""
    return jax.vmap(lambda row, s: jax.lax.dynamic_slice(row, (s,), (width,)))(seq, start)


def tail(length: jax.Array) -> jax.Array:
    """Where the draft model's block of the last two committed tokens starts: length − 2, or
    0 for a one-token prompt, which has no second-last token (its block ends in padding).

    >>> tail(jnp.array([5, 2, 1])).tolist()
    [3, 0, 0]
    """
    return jnp.maximum(length - 2, 0)


@dataclass(frozen=True)
class DraftModel(Drafter):
    """A small separate language model sampled autoregressively γ times per round.

    Cache invariant: the draft's KV cache holds every committed token except the last two.
    Each round starts by feeding it those two tokens as one block. That re-writes one cached
    token (same value, harmless) and — the subtle part — after a round where all γ drafts
    were accepted it catches up x_γ, the draft's own last token, which it sampled but never
    fed to itself. Fixed shapes, no branch: every round looks the same.

    A one-token prompt has no second-last token: its cache holds nothing, and its block is
    [the token, padding] at positions 0, 1, the padding's output unread and its slot
    forgotten (`tail`). A block from slot −1 would leave its first query nothing to attend
    to: a NaN law, whose NaN keys and values, stale but multiplied by a zero weight, would
    reach every later query (0 · NaN = NaN) for the rest of the run.
    """

    graphdef: Any
    cfg: ModelConfig
    name: str = "draft"

    @classmethod
    def load(cls, models, name):
        cfg, graphdef, params = models["draft"]
        return cls(graphdef, cfg), params

    def kv_models(self) -> tuple:
        return (self.cfg,)

    def init(self, dparams, tokens, lengths, hidden=None, capacity=None) -> KVCache:
        c = self.cfg
        B, Lb = tokens.shape
        cache = init_cache(c.n_layer, c.n_head, c.head_dim, B, capacity or c.n_ctx)
        positions = jnp.broadcast_to(jnp.arange(Lb), (B, Lb))
        _, _, cache = forward(self.graphdef, dparams, tokens, positions, cache)
        return rollback(cache, tail(lengths))

    def propose(self, dparams, cache, seq, length, key, sp, gamma, tilt=None):
        """`tilt(q, i)`, if given, turns the model's law at draft i into the law that draft is
        drawn from — and reported as q (SSD's Saguaro sampling, ssd/loop.py)."""
        law = (lambda q, i: q) if tilt is None else tilt
        start = tail(length)  # (B,) the second-last token's position, 0 for a one-token prompt
        last_two = take_rows(seq, start, 2)  # (B, 2)
        positions = start[:, None] + jnp.arange(2)  # (B, 2)
        logits, _, cache = forward(
            self.graphdef, dparams, last_two, positions, rollback(cache, start)
        )
        cache = rollback(cache, length)  # a one-token prompt's padding slot is forgotten
        keys = split_keys(key, gamma)
        last = jnp.where((length == 1)[:, None], logits[:, 0], logits[:, 1])  # (B, V)
        q1 = law(sampling_probs(last, sp), 0)  # (B, V): after the last committed token
        x1 = sample_rows(keys[0], q1)  # (B,)

        def draft_one(carry, i_and_key):  # feed draft i, sample draft i + 1
            cache, x = carry
            i, k = i_and_key
            logits, _, cache = forward(
                self.graphdef, dparams, x[:, None], (length - 1 + i)[:, None], cache
            )
            q = law(sampling_probs(logits[:, 0], sp), i)  # (B, V)
            x_next = sample_rows(k, q)  # (B,)
            return (cache, x_next), (x_next, q)

        (cache, _), (xs, qs) = jax.lax.scan(
            draft_one, (cache, x1), (jnp.arange(1, gamma), keys[1:])
        )
        drafts = jnp.concatenate([x1[:, None], xs.T], axis=1)  # (B, γ)
        q = jnp.concatenate([q1[:, None], jnp.moveaxis(qs, 0, 1)], axis=1)  # (B, γ, V)
        return drafts, q, cache

    def commit(self, dparams, cache, hidden, emitted, start, length) -> KVCache:
        return cache  # it re-reads the committed tail itself at the next propose


def lookup(seq: jax.Array, length: jax.Array, gamma: int, max_ngram: int, min_ngram: int):
    """Prompt lookup for one row: find the earliest occurrence of the last n tokens (n =
    max_ngram, then shorter) and propose the γ tokens that followed it.

    seq (S,), length (): returns (drafts (γ,), n_matched ()), n_matched = 0 when nothing matched.

    Example: committed "a b c a b" (length 5), n = 2 -> suffix "a b" also ends at index 1;
    what followed was "c a b", so the drafts are [c, a, b, c, ...]. The continuation runs up to
    the present and then wraps with the period of the match (here 3): a repeating pattern keeps
    repeating, and the drafts never read past the committed tokens.

    Why the earliest occurrence (as Saxena's original and Hugging Face's do): text that is
    said again tends to start again from the top — "Let me say them all back. The capital of"
    continues like the *first* "The capital of", not the latest. On the benchmark's greedy
    outputs the earliest occurrence and 5 tokens of context draft more of the repetitive text
    than the latest and 3, and a little less code (docs/results.md, "Why the code is shaped as
    it is").
    """
    S = seq.shape[0]
    ends = jnp.arange(S)  # candidate end index j of an earlier occurrence
    best_end, best_n = length - 2, jnp.int32(0)  # fallback: repeat the last token
    for n in range(min_ngram, max_ngram + 1):  # longer n overrides shorter: loop upwards
        ok = (ends >= n - 1) & (ends <= length - 2)
        for i in range(n):  # seq[j - i] == seq[length - 1 - i] for every i < n
            ok &= seq[jnp.clip(ends - i, 0, S - 1)] == seq[jnp.clip(length - 1 - i, 0, S - 1)]
        found = jnp.any(ok) & (length > n)
        earliest = jnp.argmax(ok)  # the first True
        best_end = jnp.where(found, earliest, best_end)
        best_n = jnp.where(found, n, best_n)
    period = length - 1 - best_end  # >= 1
    drafts = seq[best_end + 1 + jnp.arange(gamma) % period]  # (γ,)
    return drafts, best_n


@dataclass(frozen=True)
class PromptLookup(Drafter):
    """Prompt lookup decoding (Saxena, 2023; vLLM's "ngram"): no second model at all.

    Drafts are copied from earlier in the row's own text, so they are deterministic: a point
    mass, q = one-hot(x). The verify rule then accepts x with probability p(x), and on a
    rejection resamples from p with x removed — exact at every temperature. It shines when the
    output repeats the input (quoting, code edits, lists) and costs almost nothing otherwise.

    When nothing matches (the last token never occurred before), there is nothing worth
    copying: with `skip_unmatched` it proposes no drafts and the round is a plain one-token
    decode step, as serving engines do (vLLM's n-gram proposer returns no proposal). The
    rounds that would verify γ + 1 hopeless tokens (each more than a target step) cost one
    step instead (docs/results.md, "Every way to draft, on three workloads").
    """

    vocab_size: int
    max_ngram: int = 5  # try to match the last 5 tokens first ...
    min_ngram: int = 1  # ... down to the last one
    skip_unmatched: bool = True  # no match -> no drafts (a decode step), rather than γ guesses
    name: str = "ngram"

    @classmethod
    def load(cls, models, name):
        return cls(models["target"][0].vocab_size), ()

    def init(self, dparams, tokens, lengths, hidden=None, capacity=None):
        return ()  # stateless: the committed tokens are the whole index

    @property
    def varies_length(self) -> bool:
        return self.skip_unmatched

    def matches(self, seq, length, gamma):
        """Every row's lookup: (drafts (B, γ), n-gram length matched (B,), 0 for none)."""
        return jax.vmap(lambda s, n: lookup(s, n, gamma, self.max_ngram, self.min_ngram))(
            seq, length
        )

    def propose(self, dparams, dstate, seq, length, key, sp, gamma):
        drafts, _ = self.matches(seq, length, gamma)  # (B, γ)
        return drafts, jax.nn.one_hot(drafts, self.vocab_size, dtype=jnp.float32), dstate

    def draft_length(self, seq, length, gamma):
        _, matched = self.matches(seq, length, gamma)  # the same lookup: XLA computes it once
        return jnp.where((matched > 0) | (not self.skip_unmatched), gamma, 0).astype(jnp.int32)
