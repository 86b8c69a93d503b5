"""Layer 2 at the context's end: speculation emits exactly what autoregressive decoding would.

A row whose prompt leaves room for only M = 4 more tokens in the context (N_CTX = 16, a
12-token prompt) and asks for more (max_new_tokens = 10) must come back with exactly 4 tokens,
distributed as the target's joint law of 4 tokens — as autoregressive decoding gives. With
γ = 3 or 5 a full γ+1 block no longer fits after the first round, so the last rounds draft
fewer tokens (speculative.room_for_drafts); before that fix the loop stopped when no full
block fitted and returned 1–4 tokens, a different law. Trees keep their full depth there and
cut what lies past the end, like max_new_tokens does.

Each test: N = 100,000 rows (slow marker; the fast layer has a 20,000-row smoke test), a
Pearson chi-square test against the exact law over the 625 sequences (cells with expected
count < 5 pooled), threshold p-value > 1e-4, so the false-failure probability is 1e-4 per test
(fixed seeds keep CI deterministic). Every row must also have exactly 4 tokens — a
deterministic check that fails on the old loop with certainty. The same threshold
rejects broken samplers with p-values below 1e-12 at half this N (test_power.py).
"""

import pytest

from nanospec.drafters import DraftModel, PromptLookup
from nanospec.sampling import SamplingParams
from nanospec.trees.tree import Tree
from tests.statistical.laws import (
    N_CTX,
    V,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_pair,
)

N = 100_000
THRESHOLD = 1e-4
PROMPT = [1, 3, 0, 2, 4, 1, 3, 0, 2, 4, 1, 3]  # 12 tokens, repeating: prompt lookup matches
M = N_CTX - len(PROMPT)  # 4: all the room there is
MAX_NEW = 10  # more than the room: the context's end is what stops every row


@pytest.fixture(scope="module")
def pair():
    target, draft = tiny_pair()
    return target, draft


def _check(pair, drafter, dparams, gamma, n, seed, sp=SamplingParams.make(1.0), tree=None):
    target = pair[0]
    out = run_speculative(
        target,
        drafter,
        dparams,
        [PROMPT] * n,
        M,
        sp,
        gamma,
        seed,
        tree=tree,
        top=False,
        max_new=MAX_NEW,
    )[tuple(PROMPT)]
    lengths = sorted({len(s) for s in out})
    assert lengths == [M], f"rows ended with {lengths} new tokens; autoregressive gives {M}"
    pvalue = chi_square_pvalue(encode(out), exact_law(target, PROMPT, M, sp))
    assert pvalue > THRESHOLD, f"p-value {pvalue:.3g}"


@pytest.mark.optimized
def test_smoke_context_end_law_at_20k(pair):
    """N = 20,000, the draft model with γ = 5 (only the first round fits a full block)."""
    _check(pair, DraftModel(pair[1][1], pair[1][0]), pair[1][2], gamma=5, n=20_000, seed=300)


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.parametrize("gamma", [3, 5])
def test_draft_model_at_the_context_end(pair, gamma):
    _check(
        pair,
        DraftModel(pair[1][1], pair[1][0]),
        pair[1][2],
        gamma,
        N,
        seed=310 + gamma,
        sp=SamplingParams.make(0.7, 0, 0.9),
    )


@pytest.mark.optimized
@pytest.mark.slow
def test_prompt_lookup_at_the_context_end(pair):
    """Point-mass drafts (accept with p(x)), γ = 4 > room after the first round."""
    _check(pair, PromptLookup(V), (), gamma=4, n=N, seed=320)


@pytest.mark.optimized
@pytest.mark.slow
def test_a_tree_at_the_context_end(pair):
    """A 2,2,1 SpecInfer tree (sampled siblings, depth 3): cut at the end, not shrunk."""
    tree = Tree.from_branching((2, 2, 1))
    _check(
        pair, DraftModel(pair[1][1], pair[1][0]), pair[1][2], tree.max_depth, N, seed=330, tree=tree
    )
