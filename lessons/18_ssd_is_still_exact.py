# %% [markdown]
# # Lesson 18 — SSD is still exact
#
# **You will see** speculative speculative decoding (lesson 17) run 4,000 times on tiny random
# models whose exact output law can be enumerated, fit that law at T = 1 with hits and misses
# mixed — and a broken SSD, one that judges a miss the way the paper's reference code does
# with its just-in-time backup off (`jit_speculate=False`), rejected by the same test.
#
# **It explains** why `nanospec/ssd/loop.py` needs no change to the verify rule, and what
# `tests/statistical/test_ssd.py` checks (layers 2 and 3 of docs/design.md §5).
#
# Which branches get cached, and their drafts, depend only on the draft side: the committed
# text, this round's drafts and the draft's key — never on the target's randomness in the
# round being verified. So given the outcome, the branch that matches it holds a fresh sample
# from the law q stored with it, and the verify rule is exact for drafts from any law it is
# told (lesson 04). A miss's backup drafts are judged the same way. Greedy, that means SSD's
# text is the target's greedy text (lesson 17 checks it); at T > 0 it is a claim about a law.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats

from nanospec.drafters import DraftModel
from nanospec.generate import pad_prompts
from nanospec.model import GPT, ModelConfig, forward
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams, sample_rows, sampling_probs
from nanospec.speculative import ChainJudge, exact_rule
from nanospec.ssd.fanout import uniform_fanout
from nanospec.ssd.loop import SSDSpeculator
from nanospec.teach import claim, table, tv

T1 = SamplingParams.make(1.0)

# %% [markdown]
# We test the law as the suite does (tests/statistical/test_ssd.py): on tiny random models with
# V = 5, where every 4-token continuation can be enumerated (5⁴ = 625 of them) and the target's
# exact law computed; 4,000 runs of the real SSD loop (γ = 3, one branch per k; the suite runs
# 20,000 by default, 50,000 in its slow cells), a chi-square test as in lesson 16. Then the same
# test on a broken SSD that judges misses as the paper's reference code does with just-in-time
# speculation off (its `jit_speculate`, nothing to do with `jax.jit`): accept a draft iff it is
# the target's argmax, else sample from p. Right when p is one-hot (greedy), wrong at T = 1 —
# and every row's first round is a miss. (The right loop's TV from the law is not 0 either:
# 4,000 runs spread over 625 cells are noisy. The p-value says whether a distance is more than
# that noise.)

# %%
V, M, G, N_LAW = 5, 4, 3, 4_000


def tiny(seed):
    """A random GPT with V = 5, its weights scaled so that its laws are peaked."""
    c = ModelConfig(name=f"tiny{seed}", vocab_size=V, n_ctx=16, n_layer=2, n_head=2, d_model=16)
    g, p = nnx.split(GPT(c, nnx.Rngs(seed)))
    return c, g, jax.tree.map(lambda x: 12 * x if x.ndim >= 2 else x, p)


tcfg, tgraph, tparams = tiny(0)
dp_tiny = jax.tree.map(lambda a, b: (a + b) / 2, tparams, tiny(1)[2])  # the draft: half-way
seqs = np.array(np.meshgrid(*[range(V)] * M, indexing="ij")).reshape(M, -1).T  # (625, M)
context = np.c_[np.tile([1, 3], (len(seqs), 1)), seqs]  # the prompt [1, 3], then each sequence
logits, _, _ = forward(
    tgraph, tparams, jnp.asarray(context), jnp.broadcast_to(jnp.arange(M + 2), context.shape)
)
law = np.asarray(sampling_probs(logits, T1), float)[
    np.arange(len(seqs))[:, None], 1 + np.arange(M), seqs
].prod(1)
law /= law.sum()  # (625,) the target's exact law of 4 tokens
tiny_ssd = SSDSpeculator(
    graphdef=tgraph,
    cfg=tcfg,
    drafter=DraftModel(tgraph, tcfg),
    gamma=G,
    eos_id=-1,
    fanout=uniform_fanout(1, G),
)
rows = pad_prompts([[1, 3]] * N_LAW, tcfg.n_ctx)


def law_test(seed, loop=tiny_ssd):
    """(p-value, TV from the exact law, hit rate) of N_LAW runs of a tiny SSD loop."""
    state, counters = loop.run(tparams, dp_tiny, *rows, jax.random.key(seed), T1, M)
    cells = np.array(generated(state, rows[1])) @ V ** np.arange(M - 1, -1, -1)  # base-5 index
    counts, expected = np.bincount(cells, minlength=len(law)), N_LAW * law
    small = expected < 5  # pooled into one cell, as in the suite
    chi = stats.chisquare(
        np.append(counts[~small], counts[small].sum()),
        np.append(expected[~small], expected[small].sum()),
    )
    hits = counters.cached_rounds() / (int(np.sum(counters.hist)) - N_LAW)  # first rounds aside
    return chi.pvalue, tv(counts / N_LAW, law), hits


def argmax_on_miss(key, proposal, p, n_draft):
    """The broken rule on misses: accept while the draft is p's argmax, then sample p."""
    drafts, hit = proposal.drafts, proposal.cached  # `cached`: the drafts came from the cache
    right = exact_rule(key, proposal, p, n_draft)  # the right rule, for the hits
    match = (drafts == jnp.argmax(p[:, :G], -1)).astype(jnp.int32)  # (B, γ)
    n = jnp.sum(jnp.cumprod(match, axis=1), axis=1)  # drafts accepted: the leading matches
    token = sample_rows(jax.random.fold_in(key, 7), p[jnp.arange(len(n)), n])
    return right._replace(
        n_accepted=jnp.where(hit, right.n_accepted, n),
        token=jnp.where(hit, right.token, token),
        is_bonus=jnp.where(hit, right.is_bonus, n == G),
    )


results = {"SSD": law_test(seed=1)}
# The rule is a value the loop's judge holds (speculative.ChainJudge): judge with the broken one.
broken = replace(tiny_ssd, judge=ChainJudge(rule=argmax_on_miss))
results["SSD, misses judged by argmax"] = law_test(seed=1, loop=broken)
table(
    f"4-token law, {N_LAW:,} runs, T = 1",
    ["loop", "hit rate", "TV from the law", "p-value"],
    [[name, f"{h:.2f}", f"{d:.3f}", f"{pv:.2g}"] for name, (pv, d, h) in results.items()],
)
(pv, _, h), (pv_b, _, _) = results.values()
claim(
    pv > 1e-4 and 0 < h < 1,
    f"SSD, hits and misses mixed ({h:.0%} hits), fits the exact law: "
    f"p-value {pv:.2g} > 1e-4 (a false failure one run in 10,000)",
)
claim(pv_b < 1e-12, f"judging misses by the argmax is caught: p-value {pv_b:.1g} < 1e-12")


# %% [markdown]
# ## What to take away
#
# SSD changes where drafts come from, never how they are judged. A test of the output law
# needs no knowledge of the cache: it compares what the loop writes with what the target
# alone would, and a rule that is inexact on hits or on misses shows up there, if it moves
# the law by more than the noise of N runs (lesson 16's power). A cache bug
# that keeps the law — a branch looked up by k alone, test_ssd.py's case (c) — does not: its
# drafts are still judged against the law they came from, so only acceptance drops, and
# test_ssd.py catches it there.
