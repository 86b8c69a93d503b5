"""Exact laws by enumeration on tiny models, and N runs of the real loop to test against them.

Tiny random transformers (vocabulary V = 5) make every continuation enumerable: the exact
target law of m new tokens is the chain rule over all V^m sequences, computed with the same
`sampling_probs` the samplers use. The implementation is then run N times (the rows of batches
of CHUNK are independent draws: row b of batch c is keyed by fold_in(fold_in(key, c), b)) and
compared with a chi-square test.

This is the core the statistical suite (tests/statistical/) and `python -m
nanospec.measure.gpu_check` share; each states its own N, threshold and false-failure
probability. What this file deliberately leaves out: the tests themselves, and the laws of
single rounds, trees and other drafters (tests/statistical/laws.py).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats

from nanospec.generate import pad_prompts
from nanospec.model import GPT, ModelConfig, forward
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import Speculator
from nanospec.trees.loop import TreeSpeculator

V = 5  # vocabulary of the tiny models
N_CTX = 16
PROMPT = [1, 3]  # two tokens (tests/test_one_token_prompt.py covers one)
# Rows per batch of the law tests. Small batches run faster: on a 2-core CPU 20,000 rows of a
# 2,2,1 tree took 2.9 s in batches of 1,000 and 6.9 s in one batch of 20,000 (a γ = 5 chain:
# 1.15 s and 1.78 s), because a small batch's KV caches stay in the CPU's caches.
CHUNK = 1_000


def tiny_lm(seed: int, n_layer: int = 2, d_model: int = 16, scale: float = 12.0):
    """A random GPT whose next-token laws are peaked and depend on the context.

    GPT-2's init (std 0.02) gives near-uniform outputs; scaling every matrix makes the laws
    sharp enough that target and draft disagree often — so rejections, residuals and bonus
    tokens all happen many times in N runs.
    """
    cfg = ModelConfig(
        name=f"tiny{seed}", vocab_size=V, n_ctx=N_CTX, n_layer=n_layer, n_head=2, d_model=d_model
    )
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(seed)))
    params = jax.tree.map(lambda x: x * scale if x.ndim >= 2 else x, params)
    return cfg, graphdef, params


def tiny_pair():
    """(target, draft): the draft is the target's weights blended half-way with another
    random model's, so it agrees often but not always — with γ = 3, about 25% of first rounds
    reject the first draft and 36% accept all three (then a bonus token is drawn)."""
    target, other = tiny_lm(0), tiny_lm(1)
    cfg = ModelConfig.from_dict({**target[0].to_dict(), "name": "tiny-draft"})
    blended = jax.tree.map(lambda a, b: 0.5 * a + 0.5 * b, target[2], other[2])
    return target, (cfg, target[1], blended)


def exact_law(
    model, prompt: list[int], m: int, sp: SamplingParams, held=(), min_new: int = 0
) -> np.ndarray:
    """P(next m tokens = s) for every s in V^m (index: base-V number), float64.

    With `held` tokens, vLLM's min_tokens written out on its own: their logits are −∞ at the
    first `min_new` new positions, before `sp` (which must hold nothing itself) is applied."""
    cfg, g, p = model
    assert sp.held is None, "the hold is written out here, independently of sampling.hold"
    seqs = np.array(list(itertools.product(range(V), repeat=m)), np.int32)  # (V^m, m)
    full = np.concatenate([np.tile(prompt, (len(seqs), 1)), seqs], axis=1)  # (V^m, L+m)
    T, L = full.shape[1], len(prompt)
    logits, _, _ = forward(g, p, jnp.asarray(full), jnp.broadcast_to(jnp.arange(T), full.shape))
    banned = np.zeros((T, V), bool)
    banned[L - 1 : L - 1 + min_new, list(held)] = True  # position L-1+i: the law of new token i
    logits = jnp.where(banned, -jnp.inf, logits)
    probs = np.asarray(sampling_probs(logits, sp), np.float64)  # (V^m, T, V)
    step_p = probs[np.arange(len(seqs))[:, None], L - 1 + np.arange(m)[None, :], seqs]  # (V^m, m)
    law = step_p.prod(axis=1)
    return law / law.sum()


def encode(seqs: list[list[int]]) -> np.ndarray:
    """Sequences of equal length m -> base-V integers (the cell index of exact_law)."""
    arr = np.asarray(seqs)
    return (arr * V ** np.arange(arr.shape[1] - 1, -1, -1)).sum(axis=1)


def run_speculative(
    target,
    drafter,
    dparams,
    prompts: list[list[int]],
    m: int,
    sp: SamplingParams,
    gamma: int,
    seed: int,
    chunk: int = CHUNK,
    tree=None,
    top: bool = True,
    max_new: int | None = None,
    loop=None,
):
    """Generate m tokens for every prompt row; returns {prompt: list of sequences}.

    `max_new` (default m) above m: the context's end, not max_new_tokens, stops the rows.

    With `tree`, rounds draft that token tree (top-k siblings if `top`, else sampled) instead
    of a chain of γ; `loop` runs that loop object instead (its drafter drafts).

    Rows run `chunk` at a time, the last chunk filled up with copies whose draws are dropped:
    every test at every N runs one program shape."""
    cfg, g, p = target
    out: dict[int, list] = {}
    for c, start in enumerate(range(0, len(prompts), chunk)):
        rows = prompts[start : start + chunk]
        tokens, lengths = pad_prompts(rows + [rows[0]] * (chunk - len(rows)), cfg.n_ctx)
        key = jax.random.fold_in(jax.random.key(seed), c)
        if loop is not None:
            spec = loop
        elif tree is None:
            spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=-1)
        else:
            spec = TreeSpeculator(
                graphdef=g, cfg=cfg, drafter=drafter, tree=tree, top=top, eos_id=-1
            )
        state, _ = spec.run(p, dparams, tokens, lengths, key, sp, max_new or m)
        for row, seq in zip(rows, generated(state, lengths)):
            out.setdefault(tuple(row), []).append(seq)
    return out


def chi_square_pvalue(
    observed_cells: np.ndarray, law: np.ndarray, min_expected: float = 5.0
) -> float:
    """Pearson chi-square goodness of fit, pooling cells whose expected count is below 5."""
    n = len(observed_cells)
    counts = np.bincount(observed_cells, minlength=len(law)).astype(np.float64)
    expected = law * n
    if counts[expected == 0].sum() > 0:
        return 0.0  # a sequence the target can never produce was produced: certainly wrong
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)
