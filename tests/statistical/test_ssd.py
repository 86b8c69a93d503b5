"""Layers 2 and 3 for speculative speculative decoding (ssd/loop.py): the law stays exact.

Same machinery as test_joint_law.py (tiny V = 5 transformers, the exact 4-token law by
enumeration, N runs of the fused loop as the rows of its batches, Pearson chi-square with cells of
expected count < 5 pooled). SSD changes where drafts come from — a speculation cache built
while the previous round was verified, or a backup on a miss — and Saguaro sampling changes the
law they are drawn from; the verify rule must be told that law, and nothing else may change.

Law tests: N = 50,000 (slow; a 20,000-row smoke test runs by default: uniform fan-out, C = 1,
the neural backup, two prompts in one batch), threshold p-value > 1e-4, false-failure
probability 1e-4 per test (4 here with the one below; fixed seeds keep CI deterministic). The
slow cells: geometric fan-out with C = 0.5 and the fast backup at T = 1, and uniform fan-out 2
with C = 0.7 and the neural backup at T = 0.7 with top-k and top-p. In every cell some rounds
have rows that hit and rows that miss (asserted on 2,000 rows, step by step).

Power tests: N = 10,000 (measured: both underflow to p = 0 there), each broken
variant must be rejected with p < 1e-12:
(a) drafts drawn with Saguaro's q' but verified against the unscaled q;
(b) a miss "verified" the way the reference code does with just-in-time speculation off
    (`jit_speculate=False`, ssd/utils/verify.py; not jax.jit) — accept a draft iff it
    is the target's argmax, else sample from p — exact at T = 0 only, so tested at T = 1.
(c) A cache looked up by k alone is *not* a law error: the branch's drafts are still verified
    against the law they were drawn from, so the text stays exact (asserted: the joint law
    passes at N = 10,000). Its drafts continue a different text, so they are accepted less:
    what catches it is acceptance, measured side by side with the right lookup on the same
    2,000 rows and keys (drafts accepted per hit round; Welch's z > 5, one-sided false failure
    3e-7). At T = 0, tests/test_ssd.py catches it without statistics: SSD's rounds must be
    SD's, draft for draft.
"""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nanospec.drafters
import nanospec.ssd.loop
from nanospec.drafters import DraftModel
from nanospec.generate import pad_prompts
from nanospec.sampling import SamplingParams, sample_rows
from nanospec.speculative import ChainJudge, exact_rule
from nanospec.ssd.fanout import geometric_fanout, uniform_fanout
from nanospec.ssd.loop import SSDSpeculator, saguaro
from tests.statistical.laws import (
    PROMPT,
    PROMPT_B,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_pair,
)

N = 50_000
N_POWER = 10_000
THRESHOLD = 1e-4
POWER = 1e-12
M, GAMMA = 4, 3
CELLS = {  # name: (fan-out, C, backup, (temperature, top_k, top_p))
    "geometric6-C0.5-fast-T1": (geometric_fanout(6, 0.6, 0.5, GAMMA), 0.5, "fast", (1.0, 0, 1.0)),
    "uniform2-C0.7-neural-T0.7-topk3-topp0.9": (
        uniform_fanout(2, GAMMA),
        0.7,
        "neural",
        (0.7, 3, 0.9),
    ),
}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def ssd_loop(pair, fanout, c, backup):
    (cfg, g, _), draft = pair
    return SSDSpeculator(
        graphdef=g,
        cfg=cfg,
        drafter=DraftModel(draft[1], draft[0]),
        gamma=GAMMA,
        eos_id=-1,
        fanout=fanout,
        saguaro_c=c,
        backup=backup,
    )


def pvalues(pair, loop, sp, n, seed, prompts=(PROMPT,)):
    target, draft = pair
    rows = [list(prompts[i % len(prompts)]) for i in range(n)]
    out = run_speculative(target, loop.drafter, draft[2], rows, M, sp, GAMMA, seed, loop=loop)
    return [
        chi_square_pvalue(encode(out[tuple(p)]), exact_law(target, list(p), M, sp)) for p in prompts
    ]


def round_by_round(pair, loop, sp, n, seed, max_new=M):
    """(hit, accepted drafts, live) for every round of n rows, step by step: (rounds, n) each."""
    target, draft = pair
    tokens, lengths = pad_prompts([PROMPT] * n, target[0].n_ctx)
    hit, acc, live = [], [], []
    for rnd in loop.rounds(target[2], draft[2], tokens, lengths, jax.random.key(seed), sp, max_new):
        hit.append(np.asarray(rnd.trace.cached))
        acc.append(np.asarray(rnd.trace.verdict.n_accepted))
        live.append(np.asarray(rnd.trace.live))
    return np.array(hit), np.array(acc), np.array(live)


@pytest.mark.optimized
def test_smoke_ssd_law_at_20k(pair):
    """N = 20,000: uniform fan-out 1, C = 1, the neural backup, two prompts in one batch."""
    loop = ssd_loop(pair, uniform_fanout(1, GAMMA), 1.0, "neural")
    for pvalue in pvalues(
        pair, loop, SamplingParams.make(1.0), 20_000, seed=100, prompts=(PROMPT, PROMPT_B)
    ):
        assert pvalue > THRESHOLD, f"p-value {pvalue:.3g}"


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS)
def test_ssd_joint_law(pair, cell):
    fanout, c, backup, sp = CELLS[cell]
    loop = ssd_loop(pair, fanout, c, backup)
    hit, _, live = round_by_round(pair, loop, SamplingParams.make(*sp), 2_000, seed=1)
    mixed = np.any(hit & live, axis=1) & np.any(~hit & live, axis=1)
    assert np.any(mixed[1:]), "no round had rows that hit and rows that missed"
    (pvalue,) = pvalues(pair, loop, SamplingParams.make(*sp), N, seed=7)
    assert pvalue > THRESHOLD, f"{cell}: p-value {pvalue:.3g}"


# --- power ------------------------------------------------------------------------------------

C_BROKEN = 0.3


def _draw_with_saguaro(key, q):  # draws from q' but the caller reports (and verifies) q
    return sample_rows(key, saguaro(q, 1, C_BROKEN))


def _greedy_on_miss(key, proposal, p, n_draft):
    """The reference code's miss path with just-in-time speculation off: accept iff the draft
    is p's argmax, else draw p.
    (A rule for speculative.ChainJudge: it reads which drafts came from the cache.)"""
    drafts, hit = proposal.drafts, proposal.cached
    right = exact_rule(key, proposal, p, n_draft)
    G = drafts.shape[1]
    match = drafts == jnp.argmax(p[:, :G], axis=-1)
    n = jnp.sum(jnp.cumprod(match.astype(jnp.int32), axis=1), axis=1)
    law = p[jnp.arange(drafts.shape[0]), n]  # (B, V)
    token = sample_rows(jax.random.fold_in(key, 7), law)
    return right._replace(
        n_accepted=jnp.where(hit, right.n_accepted, n),
        token=jnp.where(hit, right.token, token),
        is_bonus=jnp.where(hit, right.is_bonus, n == G),
    )


def _by_k_alone(branch_k, t, outcome):
    match = jnp.asarray(branch_k)[None, :] == outcome[:, :1]  # (B, K): any t* will do
    return jnp.any(match, axis=1), jnp.argmax(match, axis=1)


BROKEN = {
    "saguaro_verified_against_q": ((nanospec.drafters, "sample_rows", _draw_with_saguaro), 1.0),
    "miss_accepts_the_argmax": (ChainJudge(rule=_greedy_on_miss), 1.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.optimized
def test_ssd_power(pair, break_with, broken):
    broken_part, c = BROKEN[broken]
    loop = ssd_loop(pair, uniform_fanout(1, GAMMA), c, "neural")
    if isinstance(broken_part, ChainJudge):  # a broken verify rule: judge with it
        loop = replace(loop, judge=broken_part)
    else:  # a broken sampler inside the drafter: patch it in
        break_with(*broken_part)
    (pvalue,) = pvalues(pair, loop, SamplingParams.make(1.0), N_POWER, seed=3)
    assert pvalue < POWER, f"{broken} slipped through: p-value {pvalue:.3g}"


@pytest.mark.slow
@pytest.mark.optimized
def test_a_cache_looked_up_by_k_alone_is_exact_but_accepts_less(pair, break_with):
    sp, loop = SamplingParams.make(1.0), ssd_loop(pair, uniform_fanout(1, GAMMA), 1.0, "neural")
    hit, acc, live = round_by_round(pair, loop, sp, 2_000, seed=5, max_new=12)
    break_with(nanospec.ssd.loop, "lookup", _by_k_alone)
    (pvalue,) = pvalues(pair, loop, sp, N_POWER, seed=3)
    assert pvalue > THRESHOLD, f"the law moved: p-value {pvalue:.3g}"  # ...still exact
    hit_k, acc_k, live_k = round_by_round(pair, loop, sp, 2_000, seed=5, max_new=12)
    # Drafts accepted per hit round, right lookup vs k alone (Welch's z on the round means).
    right, wrong = acc[hit & live], acc_k[hit_k & live_k]
    z = (right.mean() - wrong.mean()) / np.sqrt(right.var() / len(right) + wrong.var() / len(wrong))
    print(
        f"drafts accepted per hit round: {right.mean():.3f} by (k, t*), {wrong.mean():.3f} "
        f"by k alone: z = {z:.1f}"
    )
    assert z > 5, f"acceptance on hits {right.mean():.3f} vs {wrong.mean():.3f}: z = {z:.1f}"
