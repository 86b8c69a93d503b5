"""Layers 2 and 3 for token trees, through the whole loop: grow, one tree pass, walk, compact.

Same machinery as test_joint_law.py (tiny V = 5 transformers, the exact 4-token law by
enumeration, N runs of the fused loop as the rows of one batch, Pearson chi-square with cells
of expected count < 5 pooled), with `trees.loop.TreeSpeculator` and every tree-capable
drafter: the draft model, and random Medusa, EAGLE and MTP heads. Two regimes: `sample`
(SpecInfer: siblings i.i.d. from the drafter's law, at T = 1) and `top` (deterministic top-k
siblings, point masses, under temperature + top-k + top-p).

Law tests: N = 100,000 (slow; a 20,000-row smoke test runs by default), threshold p-value
> 1e-4: false-failure probability 1e-4 per test (6 tests: family-wise below 1e-3; fixed
seeds keep CI deterministic). The draft model runs both regimes; each head runs the sampled
one, where its law q matters beyond its argmax (the regimes share `pick_children` and the
walk, which the draft model's two cells and tests/test_tree.py cover). Power tests: N =
20,000; each broken variant must be rejected with p < 1e-12 (power only grows with N; measured
at seed 3: 6e-161 without the compaction, 0 without the residual between siblings).
"""

import pytest

import nanospec.trees.loop
import nanospec.trees.tree
from nanospec.drafters import DraftModel
from nanospec.sampling import SamplingParams
from nanospec.trees.tree import Tree
from tests.statistical.laws import (
    PROMPT,
    PROMPT_B,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_drafters,
    tiny_pair,
)

N = 100_000
N_POWER = 20_000
THRESHOLD = 1e-4
POWER = 1e-12
M = 4
REGIMES = {  # name: (sampling, top?, tree)
    "sample-T1-2x2": (SamplingParams.make(1.0), False, Tree.from_branching((2, 2))),
    "top-T0.7-topk3-topp0.9-3x1x1": (
        SamplingParams.make(0.7, 3, 0.9),
        True,
        Tree.from_branching((3, 1, 1)),
    ),
}


@pytest.fixture(scope="module")
def setup():
    target, draft = tiny_pair()
    drafters = {"draft": (DraftModel(draft[1], draft[0]), draft[2])}
    drafters.update({k: v for k, v in tiny_drafters(target).items() if k != "ngram"})
    return target, drafters


def pvalues(setup, name, regime, n, seed, prompts=(PROMPT,)):
    target, drafters = setup
    drafter, dparams = drafters[name]
    sp, top, tree = REGIMES[regime]
    rows = [list(prompts[i % len(prompts)]) for i in range(n)]
    out = run_speculative(
        target, drafter, dparams, rows, M, sp, tree.max_depth, seed, tree=tree, top=top
    )
    return [
        chi_square_pvalue(encode(out[tuple(p)]), exact_law(target, list(p), M, sp)) for p in prompts
    ]


@pytest.mark.optimized
def test_smoke_tree_law_at_20k(setup):
    """N = 20,000: the draft model's SpecInfer tree, two prompts of different lengths."""
    for pvalue in pvalues(
        setup, "draft", "sample-T1-2x2", 20_000, seed=100, prompts=(PROMPT, PROMPT_B)
    ):
        assert pvalue > THRESHOLD, f"p-value {pvalue:.3g}"


CELLS = [("draft", regime) for regime in REGIMES] + [
    (head, "sample-T1-2x2") for head in ("medusa", "eagle", "mtp")
]


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.parametrize("name,regime", CELLS, ids=[f"{n}-{r}" for n, r in CELLS])
def test_tree_joint_law(setup, name, regime):
    (pvalue,) = pvalues(setup, name, regime, N, seed=7)
    assert pvalue > THRESHOLD, f"{name}, {regime}: p-value {pvalue:.3g}"


def _no_compaction(cache, start, path, tree):
    return cache  # leaves the accepted nodes in node order: a later sibling's K/V is misplaced


def _residual_is_p(r, q):
    return r  # a rejected sibling's law is not taken out before the next sibling is tried


BROKEN = {
    "path_not_compacted": (nanospec.trees.loop, "compact_path", _no_compaction),
    "residual_not_taken_between_siblings": (nanospec.trees.tree, "residual", _residual_is_p),
}


@pytest.mark.slow
@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.optimized
def test_tree_power(setup, break_with, broken):
    break_with(*BROKEN[broken])
    (pvalue,) = pvalues(setup, "draft", "sample-T1-2x2", N_POWER, seed=3)
    assert pvalue < POWER, f"{broken} slipped through: p-value {pvalue:.3g}"
