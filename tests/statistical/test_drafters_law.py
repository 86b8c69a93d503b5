"""Layers 2 and 3 for every other drafter: prompt lookup, Medusa, EAGLE and MTP heads.

The same machinery as test_joint_law.py and test_power.py (tiny V = 5 transformers, exact
4-token law by enumeration, N runs of the real fused loop as the rows of its batches, Pearson
chi-square with cells of expected count < 5 pooled) — only the drafter changes. The heads
have random weights (`laws.tiny_drafters`): exactness must hold whatever the drafter proposes,
and prompt lookup proposes point masses (q one-hot), the verify rule's other regime.

Law tests: N = 100,000 (slow marker; one 20,000-row smoke test per drafter in the default
run), threshold p-value > 1e-4, so each test's false-failure probability is 1e-4 (12 tests
here: family-wise below 1.2e-3; seeds are fixed, so CI is deterministic).
Power tests: N = 20,000, the same threshold; a broken sampler routed through each drafter
must be rejected with p < 1e-12. (A fifth of the law tests' N, to keep CI in its time: a test
that rejects at 20,000 runs rejects more surely at 100,000 — its power only grows with N.
Measured at seed 3: every route gives p below 1e-99, six of the eleven underflow to 0.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nanospec.heads.drafters
import nanospec.speculative
import nanospec.verify
from nanospec.cache import rollback
from nanospec.sampling import SamplingParams, sample_rows
from tests.statistical.laws import (
    PROMPT,
    PROMPT_B,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_drafters,
    tiny_lm,
)

N = 100_000
N_POWER = 20_000
THRESHOLD = 1e-4
POWER = 1e-12
M = 4
DRAFTERS = ("ngram", "medusa", "eagle", "mtp")
SETTINGS = {  # name: ((temperature, top_k, top_p), γ) — γ ≤ 3, the tiny heads' depth
    "T1-gamma3": ((1.0, 0, 1.0), 3),
    "T0.7-topk3-topp0.9-gamma2": ((0.7, 3, 0.9), 2),
}


@pytest.fixture(scope="module")
def setup():
    target = tiny_lm(0)
    return target, tiny_drafters(target)


def pvalues(setup, name, sp, gamma, n, seed, prompts=(PROMPT,)):
    target, drafters = setup
    drafter, dparams = drafters[name]
    rows = [list(prompts[i % len(prompts)]) for i in range(n)]
    out = run_speculative(target, drafter, dparams, rows, M, sp, gamma, seed)
    result = []
    for prompt in prompts:
        seqs = out[tuple(prompt)]
        assert all(len(s) == M for s in seqs)
        result.append(chi_square_pvalue(encode(seqs), exact_law(target, list(prompt), M, sp)))
    return result


@pytest.mark.parametrize("name", DRAFTERS)
@pytest.mark.optimized
def test_smoke_law_at_20k(setup, name):
    """N = 20,000, γ = 3, T = 1, two prompts of different lengths in one batch."""
    for pvalue in pvalues(
        setup, name, SamplingParams.make(1.0), 3, 20_000, seed=100, prompts=(PROMPT, PROMPT_B)
    ):
        assert pvalue > THRESHOLD, f"{name}: p-value {pvalue:.3g}"


def test_lookup_runs_include_rounds_without_drafts(setup):
    """Prompt lookup proposes nothing when the last token is new (drafters.py), so the law
    tests above cover both kinds of round: the whole batch with none (PROMPT's last token,
    3, is new: round 1 is a one-token pass) and batches mixing rows with and without."""
    from nanospec.generate import pad_prompts
    from nanospec.speculative import Speculator

    (cfg, g, p), drafters = setup
    drafter, dparams = drafters["ngram"]
    tokens, lengths = pad_prompts([list(PROMPT)] * 500 + [list(PROMPT_B)] * 500, cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=3, eos_id=-1)
    _, stats = spec.run(p, dparams, tokens, lengths, jax.random.key(0), SamplingParams.make(1.0), M)
    rounds = np.asarray(stats.hist).sum(1)
    drafted = np.asarray(stats.drafted)
    assert np.all(drafted <= 3 * (rounds - 1)), "round 1 has no drafts in any row"
    assert 0 < drafted.sum() and np.any(drafted < 3 * (rounds - 1)), "later rounds mix"


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("name", DRAFTERS)
def test_joint_law(setup, name, setting):
    (t, k, p), gamma = SETTINGS[setting]
    (pvalue,) = pvalues(setup, name, SamplingParams.make(t, k, p), gamma, N, seed=gamma)
    assert pvalue > THRESHOLD, f"{name}, {setting}: p-value {pvalue:.3g}"


def _residual_is_p(p, q):
    return p


def _rollback_off_by_one(self, state, cache, n_accepted, emitted, max_new):
    """Speculation.commit with the target cache rolled back to `length`, not `length - 1`."""
    new, n_emit = REAL_COMMIT(self, state, cache, n_accepted, emitted, max_new)
    kept = jnp.where(~state.done, new.length, new.cache.length)  # live rows: one slot too many
    return new._replace(cache=rollback(new.cache, kept)), n_emit


REAL_COMMIT = nanospec.speculative.Speculation.commit


def _sample_at_other_temperature(key, q):
    return sample_rows(key, jax.nn.softmax(jnp.log(q) / 0.7))  # samples at T=0.7, reports q at T=1


BROKEN = {
    "residual_replaced_by_p": (nanospec.verify, "residual", _residual_is_p),
    "rollback_off_by_one": (nanospec.speculative.Speculation, "commit", _rollback_off_by_one),
    "q_from_the_wrong_temperature": (
        nanospec.heads.drafters,
        "sample_rows",
        _sample_at_other_temperature,
    ),
}
ROUTES = [("ngram", "residual_replaced_by_p"), ("ngram", "rollback_off_by_one")] + [
    (head, broken) for head in ("medusa", "eagle", "mtp") for broken in BROKEN
]


@pytest.mark.slow
@pytest.mark.parametrize("name,broken", ROUTES, ids=[f"{n}-{b}" for n, b in ROUTES])
@pytest.mark.optimized
def test_power_through_each_drafter(setup, break_with, name, broken):
    break_with(*BROKEN[broken])
    (pvalue,) = pvalues(setup, name, SamplingParams.make(1.0), 3, N_POWER, seed=3)
    assert pvalue < POWER, f"{broken} through {name} slipped through: p-value {pvalue:.3g}"
