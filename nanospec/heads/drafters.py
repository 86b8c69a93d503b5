"""Drafting from the target's features: the Medusa, EAGLE and MTP drafters.

heads/modules.py has the modules, and training/heads.py trains them.

The drafters follow the protocol in drafters.py, with `dparams = drafter.prepare(head_params,
target_params)`, made once at load: the heads reuse the target's embedding, final LayerNorm and
output layer, so the target's parameters travel in too (the same buffers — nothing is copied);
EAGLE adds its projection folded into the output layer and its input layer (EagleFold).

Which feature is "known" at the start of a round? The target's cache holds every committed
token but the last one (speculative.py), so its freshest feature is h at position L−2, the one
whose output predicted the last committed token y = seq[L−1]. From it:

    Medusa: head k reads ln_f(h_{L−2}) and predicts the token at L−1+k  (k = 1..γ)
    MTP:    module 1 reads [h_{L−2} ; embed(y)] and predicts the token at L; module k reads
            the representation from module k−1 and embed(x_{k−1}) (the sampled draft)
    EAGLE:  reads pairs (f_i, token i+1) for every committed position i ≤ L−2 (its own KV
            cache); its output at L−2 is f̂_{L−1} -> law of x₁; then (f̂_{L−1}, x₁) -> f̂_L -> x₂ ...

A one-token prompt [y] has no L−2: the prefill gives only h₀, whose output is the target's
own law p₁ of x₁. So its first round drafts one step behind: x₁ from the target's law on
h₀ (the draft vocabulary's part of p₁), then the heads as if x₁ were already committed —
Medusa head k reads h₀ for x_{k+1}, MTP module 1 reads [h₀ ; embed(x₁)], EAGLE feeds the
real pair (f₀, x₁). Those are the features a longer prompt's second round reads; a head
that read "h_{−1}" instead would draft from the wrong position (round 1 of a one-token
prompt: 0 drafts accepted). After one round every row holds two tokens or more.

After the verify pass (`commit`) the target has real features for the block [y_old, x₁..x_n];
the drafters keep the one at the new L−2 (Medusa, MTP) or re-read the accepted pairs (EAGLE),
so the next round starts from the target's truth, not from their own guesses.

Every q returned is exactly the law the draft was sampled from (the head's logits through the
same sampling pipeline as the target's), so the verify rule stays exact at any temperature.

Each drafter also grows token trees (trees/grow.py).

What this file deliberately leaves out: Medusa's lossy "typical acceptance".
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nanospec.cache import rollback, run_if
from nanospec.drafters import Drafter, tail
from nanospec.heads.modules import HeadConfig
from nanospec.sampling import sample_rows, sampling_probs, split_keys


def _at(x: jax.Array, index: jax.Array) -> jax.Array:
    """x[b, index[b]] for (B, T, ...) x: one position per row, clipped into range."""
    index = jnp.clip(index, 0, x.shape[1] - 1)
    return jnp.take_along_axis(x, index.reshape(-1, 1, *([1] * (x.ndim - 2))), axis=1)[:, 0]


def one_token_rows(length: jax.Array, plain, behind, carry):
    """`plain(carry)` when every row holds two tokens or more; else `behind(one, carry)`, with
    one (B,) = the rows of a one-token prompt, which draft one step behind (module docstring).

    Both are compiled and exactly one runs, each in a `run_if` (as speculative.target_pass):
    drafting one step behind costs MTP a second module per draft and EAGLE a pass of its
    input layer, which rounds without a one-token row should not pay."""
    one = length == 1  # (B,)
    any_one = jnp.any(one)
    return run_if(~any_one, plain, run_if(any_one, lambda c: behind(one, c), carry))


def zeros_like_output(fn):
    """Zeros shaped like what fn() returns (a carry for `one_token_rows`), nothing run."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn))


@dataclass(frozen=True)
class FeatureDrafter(Drafter):
    graphdef: Any  # the head's
    hc: HeadConfig
    target_graphdef: Any  # to reuse the target's embedding, ln_f and output layer
    reads_features = True  # it drafts from the target's features

    @classmethod
    def load(cls, models, name):
        hc, graphdef, params = models[name]
        return cls(graphdef, hc, models["target"][1]), params

    @property
    def name(self) -> str:
        return self.hc.kind

    def prepare(self, head_params, target_params):
        """This drafter's dparams, made once when it is built (`Bundle.drafter`)."""
        return head_params, target_params

    def parts(self, dparams):
        head_params, target_params = dparams[:2]
        return nnx.merge(self.graphdef, head_params), nnx.merge(self.target_graphdef, target_params)

    def output_layer(self, target) -> jax.Array:
        """(K, C): the target's tied output matrix, or just its rows for the head's draft
        vocabulary (FR-Spec: the output layer is the biggest read of a draft step; tokens left
        out are never drafted, but the target can still emit them — the residual max(p − q, 0)
        keeps their mass, so exactness does not care). Drafters take it once per round."""
        w = target.wte.embedding[...]  # (V, C)
        return w[np.asarray(self.hc.draft_vocab)] if self.hc.draft_vocab else w

    def draft_logits(self, w, f) -> jax.Array:
        """Features f (..., C) -> logits (..., V); outside the draft vocabulary: −inf."""
        return self.spread(f @ w.T)

    def spread(self, logits) -> jax.Array:
        """Logits over the draft vocabulary (..., K) -> over the whole vocabulary (..., V)."""
        if not self.hc.draft_vocab:
            return logits
        full = jnp.full(logits.shape[:-1] + (self.hc.vocab_size,), -jnp.inf, logits.dtype)
        return full.at[..., np.asarray(self.hc.draft_vocab)].set(logits)


@dataclass(frozen=True)
class LastFeature(FeatureDrafter):
    """State = the target's raw hidden feature at position L−2, (B, C) — h₀ for a one-token
    prompt (`tail`), from which its first round drafts one step behind."""

    @property
    def max_gamma(self) -> int:  # one head / module per drafted position
        return self.hc.depth

    def init(self, dparams, tokens, lengths, hidden, capacity=None):
        return _at(hidden, tail(lengths))

    def commit(self, dparams, feat, hidden, emitted, start, length):
        # Block index j is position start + j; the new L−2 is index length − 2 − start (= n).
        return _at(hidden, length - 2 - start)


class MedusaDrafter(LastFeature):
    """γ ≤ K drafts in parallel from one feature: head k proposes the token k+1 steps ahead."""

    def features(self, heads, target, feat, length) -> jax.Array:
        """(B, K, C): the feature draft k + 1 is read from (index k: head k + 1's).

        subtle: a one-token prompt's row is one step behind — [ln_f(h₀), head 1, .., head K−1]:
        its first draft is the target's own next-token feature. It costs nothing (the same
        one matmul reads the features), so Medusa needs no `one_token_rows`."""
        f = target.ln_f(feat)  # (B, C)
        feats = heads(f)  # (B, K, C)
        behind = jnp.concatenate([f[:, None], feats[:, :-1]], axis=1)  # (B, K, C)
        return jnp.where((length == 1)[:, None, None], behind, feats)

    def propose(self, dparams, feat, seq, length, key, sp, gamma):
        heads, target = self.parts(dparams)
        w = self.output_layer(target)  # (K, C), read once per round
        feats = self.features(heads, target, feat, length)[:, :gamma]  # (B, γ, C)
        q = sampling_probs(self.draft_logits(w, feats), sp)  # (B, γ, V)
        keys = split_keys(key, gamma)
        drafts = jnp.stack([sample_rows(keys[i], q[:, i]) for i in range(gamma)], axis=1)  # (B, γ)
        return drafts, q, feat


class MTPDrafter(LastFeature):
    """Sequential modules: depth k conditions on depth k−1's representation and its draft."""

    def propose(self, dparams, feat, seq, length, key, sp, gamma):
        chain = lambda one, _: self.chain(dparams, feat, seq, length, key, sp, gamma, one)
        no_drafts = zeros_like_output(lambda: chain(None, None))
        drafts, q = one_token_rows(length, lambda c: chain(None, c), chain, no_drafts)
        return drafts, q, feat

    def module(self, heads, target, k: int, h, token, one):
        """Module k's (representation, feature for the law) at one drafted position; rows of
        a one-token prompt (`one`, or None: no such rows) run module k − 1 instead, and at
        k = 0 the target's own output: h₀ stays, its law is p₁ (module docstring)."""
        h_next, out = heads.layers[k](h, target.wte(token))
        if one is None:
            return h_next, out
        h_behind, out_behind = (
            (h, target.ln_f(h)) if k == 0 else heads.layers[k - 1](h, target.wte(token))
        )
        pick = lambda a, b: jnp.where(one[..., None], a, b)
        return pick(h_behind, h_next), pick(out_behind, out)

    def chain(self, dparams, feat, seq, length, key, sp, gamma, one):
        """γ drafts (B, γ) and their laws (B, γ, V)."""
        heads, target = self.parts(dparams)
        w = self.output_layer(target)
        keys = split_keys(key, gamma)
        h, token = feat, seq[jnp.arange(seq.shape[0]), length - 1]  # (B, C), (B,) = y
        drafts, qs = [], []
        for k in range(gamma):  # γ ≤ K: unrolled, each depth has its own weights
            h, out = self.module(heads, target, k, h, token, one)
            q = sampling_probs(self.draft_logits(w, out), sp)  # (B, V)
            token = sample_rows(keys[k], q)
            drafts.append(token)
            qs.append(q)
        return jnp.stack(drafts, axis=1), jnp.stack(qs, axis=1)


class EagleFold(NamedTuple):
    """What EAGLE derives, once at load: from its projection back to the target's width,
    f̂ = h P + p, and the two places f̂ goes (so a draft step never makes f̂ itself),

        the output layer W:       logits = f̂ Wᵀ                 = h M + m
        fc's feature half Fa,     fc([f̂ ; embed(x)]) = f̂ Fa + embed(x) Fb + b
        and its token half Fb:                                  = h A + a + E[x]

    and the target's feature f₀ = ln_f(h₀) of every one-token prompt [t]: at position 0 with
    nothing before it, h₀ depends on t alone. The state has no room for it (its h is the
    layer's, narrower), and only a one-token prompt's first round reads it.
    """

    M: jax.Array  # (width, K) = P Wᵀ, over the draft vocabulary
    m: jax.Array  # (K,) = p Wᵀ
    A: jax.Array  # (width, width) = P Fa
    a: jax.Array  # (width,) = p Fa + b
    E: jax.Array  # (V, width) = embed Fb: one row read per draft step
    first: jax.Array  # (V, C) f₀ of the prompt [t], row t


def _exact_matmul(x, y):
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)  # once, at load: no TF32


@dataclass(frozen=True)
class EagleDrafter(FeatureDrafter):
    """Autoregression at the feature level. State: (its KV cache over pairs 0..L−2, h_{L−2}),
    where h is the layer's own output (its width) and f̂_{L−1} = project(h_{L−2}).

    Cache invariant: after `init`/`commit` the cache holds the pairs (f_i, token i+1) for
    i = 0..L−2 — all with the target's real features — and h is the layer's output at L−2.

    dparams = (head, target, EagleFold): a draft step works at the layer's width throughout.
    It reads M (192 × 1,398) instead of the output rows at the target's width (384 × 1,398),
    and A (192 × 192) plus one row of E instead of P (192 × 384) and all of fc (768 × 192).
    Committed pairs still go through fc with the target's real features (`_read`). What the
    folds save: docs/results.md, "Why the code is shaped as it is".
    """

    def prepare(self, head_params, target_params):
        head, target = self.parts((head_params, target_params))
        w = self.output_layer(target)  # (K, C)
        C = w.shape[1]
        if head.out is None:  # a full-width layer: f̂ = h
            P, p = jnp.eye(C), jnp.zeros(C)
        else:
            P, p = head.out.kernel[...], head.out.bias[...]
        Fa, Fb = head.fc.kernel[...][:C], head.fc.kernel[...][C:]
        every = jnp.arange(self.hc.vocab_size)[:, None]  # (V, 1): V one-token prompts
        _, h0, _ = target(every, jnp.zeros_like(every))  # (V, 1, C)
        fold = EagleFold(
            M=_exact_matmul(P, w.T),
            m=_exact_matmul(p, w.T),
            A=_exact_matmul(P, Fa),
            a=_exact_matmul(p, Fa) + head.fc.bias[...],
            E=_exact_matmul(target.wte.embedding[...], Fb),
            first=target.ln_f(h0[:, 0]),
        )
        return head_params, target_params, fold

    def law(self, dparams, h, sp):
        """The draft law q (..., V) from the layer's output h (..., width)."""
        fold = dparams[2]
        return sampling_probs(self.spread(h @ fold.M + fold.m), sp)

    def step_input(self, dparams, h, tokens):
        """The layer's next input from its own output h (..., width) and the drafted tokens
        (...): fc([project(h) ; embed(tokens)]), folded."""
        fold = dparams[2]
        return h @ fold.A + fold.a + fold.E[tokens]

    def _read(self, dparams, cache, hidden, tokens_next, start, length):
        """Feed the pairs (ln_f(hidden_j), tokens_next_j) at positions start + j; keep h at L−2."""
        head, target = self.parts(dparams)
        B, T = tokens_next.shape
        positions = start[:, None] + jnp.arange(T)  # (B, T)
        h, cache = head.trunk(
            target.ln_f(hidden), target.wte(tokens_next), positions, rollback(cache, start)
        )
        return rollback(cache, length - 1), _at(h, length - 2 - start)

    def init(self, dparams, tokens, lengths, hidden, capacity=None):
        head, _ = self.parts(dparams)
        B = tokens.shape[0]
        following = jnp.concatenate(
            [tokens[:, 1:], tokens[:, -1:]], axis=1
        )  # token i+1 (pad: junk)
        return self._read(
            dparams,
            head.empty_cache(B, capacity),
            hidden,
            following,
            jnp.zeros(B, jnp.int32),
            lengths,
        )

    def commit(self, dparams, state, hidden, emitted, start, length):
        # Block index j holds position start + j; the token after it is emitted[j].
        return self._read(dparams, state[0], hidden, emitted, start, length)

    def first_feature(self, dparams, seq) -> jax.Array:
        """f₀ (B, C): the target's feature of each row's first token alone (a one-token prompt's)."""
        return dparams[2].first[seq[:, 0]]

    def pair_input(self, dparams, f, tokens) -> jax.Array:
        """The layer's input for real pairs, fc([f ; embed(tokens)]): f (..., C), tokens (...)."""
        head, target = self.parts(dparams)
        return head.fc(jnp.concatenate([f, target.wte(tokens)], axis=-1))

    def propose(self, dparams, state, seq, length, key, sp, gamma):
        cache, h = state
        chain = lambda one, c: self.chain(dparams, c[2], h, seq, length, key, sp, gamma, one)
        no_drafts = zeros_like_output(lambda: chain(None, (0, 0, cache))[:2])
        drafts, q, cache = one_token_rows(
            length, lambda c: chain(None, c), chain, (*no_drafts, cache)
        )
        return drafts, q, (cache, h)

    def chain(self, dparams, cache, h, seq, length, key, sp, gamma, one):
        """(drafts (B, γ), their laws (B, γ, V), the cache).

        Rows of a one-token prompt (`one`; None: there are none) draft one step behind: x₁
        from the target's law on f₀, then the real pair (f₀, x₁) at position 0 where another
        row feeds (f̂, x₁); the rest is the same for every row."""
        head, target = self.parts(dparams)
        keys = split_keys(key, gamma)
        q1 = self.law(dparams, h, sp)  # (B, V); cache holds L−1 pairs; project(h) = f̂_{L−1}
        if one is not None:
            f0 = self.first_feature(dparams, seq)  # (B, C)
            p1 = sampling_probs(self.draft_logits(self.output_layer(target), f0), sp)  # (B, V)
            q1 = jnp.where(one[:, None], p1, q1)
        x1 = sample_rows(keys[0], q1)
        if one is not None:
            first_in = self.pair_input(dparams, f0, x1)  # (B, width)

        def draft_one(carry, i_and_key):  # feed (f̂, x_i) at position L−2+i, sample x_{i+1}
            cache, h, x = carry
            i, k = i_and_key
            x_in = self.step_input(dparams, h, x)  # (B, width)
            if one is not None:
                x_in = jnp.where((one & (i == 1))[:, None], first_in, x_in)
            h, cache = head.layer(x_in[:, None], (length - 2 + i)[:, None], cache)
            q = self.law(dparams, h[:, 0], sp)  # (B, V)
            x_next = sample_rows(k, q)
            return (cache, h[:, 0], x_next), (x_next, q)

        (cache, _, _), (xs, qs) = jax.lax.scan(
            draft_one, (cache, h, x1), (jnp.arange(1, gamma), keys[1:])
        )
        drafts = jnp.concatenate([x1[:, None], xs.T], axis=1)  # (B, γ)
        q = jnp.concatenate([q1[:, None], jnp.moveaxis(qs, 0, 1)], axis=1)  # (B, γ, V)
        return drafts, q, cache


DRAFTERS = {"medusa": MedusaDrafter, "eagle": EagleDrafter, "mtp": MTPDrafter}
