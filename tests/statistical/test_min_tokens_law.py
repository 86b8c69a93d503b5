"""Layers 2 and 3 for vLLM's min_tokens (sampling.hold): EOS and the stop ids held back from
the target's law until a row has made `min_new` tokens, inside every loop's verify pass.

A hold is exact only if each position of a round knows how many tokens came before it: a
chain's p_i has n_new + i, a tree node's n_new + its depth, an AR or plain step's n_new. The
reference here (`laws.exact_law` with `held`) writes the hold out on its own: logits of the
held tokens set to −∞ at the first min_new new positions, then the sampling settings — the
target's law given that the text goes on, as vLLM defines it. The drafts are not held (the
verify rule needs only the law a draft came from), so held drafts are proposed and must be
rejected every time.

Same machinery as test_joint_law.py (tiny V = 5 transformers, the exact 4-token law by
enumeration, N runs as the rows of its batches, Pearson chi-square with cells of expected count
< 5 pooled). min_new = 2 of M = 4 tokens, so a γ = 3 round covers held and free positions at
once; the held tokens are the target's two likeliest first tokens (asserted: they carry most of
the unheld law's mass there), so the hold changes the law a lot.

Law tests: N = 20,000 per cell, threshold p-value > 1e-4, false-failure probability 1e-4 per
test (5 cells: AR, a draft-model chain, a 2x2 tree, SSD with shared settings, and the serving
engine's rows — settings per row, γ changing every step with plain steps between — at T = 0.7
with top-k 2 and top-p 0.9, where holding before the cuts matters; fixed seeds keep CI
deterministic).
Power test: the same N must reject, with p < 1e-12, a chain round whose positions all count
from the round's start (the hold applied to every position of a round that begins early).
"""

import jax.numpy as jnp
import numpy as np
import pytest

import nanospec.speculative
from nanospec.drafters import DraftModel
from nanospec.generate import Decoder
from nanospec.model import forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import Speculator
from nanospec.ssd.fanout import uniform_fanout
from nanospec.ssd.loop import SSDSpeculator
from nanospec.trees.loop import TreeSpeculator
from nanospec.trees.tree import Tree
from tests.statistical.laws import (
    PROMPT,
    V,
    chi_square_pvalue,
    encode,
    exact_law,
    run_engine_rows,
    run_speculative,
    tiny_pair,
)

N = 20_000
THRESHOLD = 1e-4
POWER = 1e-12
M, GAMMA, MIN_NEW = 4, 3, 2
SHARED = (1.0, 0, 1.0)  # T = 1
ROWS = (0.7, 2, 0.9)  # the engine cell's: top-k 2, where a held token would take a place
SCHEDULE = (3, 0, 2, 0, 0, 1)  # the engine cell's γ at step 1, 2, ...; repeated


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


@pytest.fixture(scope="module")
def held(pair):
    """The target's two likeliest first tokens after PROMPT: most of the law, held back."""
    cfg, g, p = pair[0]
    tokens = jnp.asarray([PROMPT])
    logits, _, _ = forward(g, p, tokens, jnp.arange(len(PROMPT))[None])
    first = np.asarray(sampling_probs(logits[0, -1], SamplingParams.make(*SHARED)))
    two = tuple(int(t) for t in np.argsort(-first)[:2])
    assert first[list(two)].sum() > 0.5, first
    return two


def hold_params(setting, held) -> SamplingParams:
    mask = np.isin(np.arange(V), held)
    return SamplingParams.make(*setting, min_new=MIN_NEW, held=mask)


def loops(pair):
    (cfg, g, _), (dcfg, dg, _) = pair
    draft = DraftModel(dg, dcfg)
    return {
        "ar": Decoder(graphdef=g, cfg=cfg, eos_id=-1),
        "chain": Speculator(graphdef=g, cfg=cfg, drafter=draft, gamma=GAMMA, eos_id=-1),
        "tree": TreeSpeculator(
            graphdef=g,
            cfg=cfg,
            drafter=draft,
            eos_id=-1,
            top=False,
            tree=Tree.from_branching((2, 2)),
        ),
        "ssd": SSDSpeculator(
            graphdef=g,
            cfg=cfg,
            drafter=draft,
            gamma=GAMMA,
            eos_id=-1,
            fanout=uniform_fanout(1, GAMMA),
            saguaro_c=1.0,
            backup="neural",
        ),
    }


def shared_pvalue(pair, held, name, seed) -> float:
    loop = loops(pair)[name]
    sp = hold_params(SHARED, held)
    out = run_speculative(
        pair[0],
        loop.drafter if name != "ar" else None,
        pair[1][2],
        [PROMPT] * N,
        M,
        sp,
        GAMMA,
        seed,
        loop=loop,
    )
    seqs = out[tuple(PROMPT)]
    assert {len(s) for s in seqs} == {M}
    law = exact_law(pair[0], PROMPT, M, SamplingParams.make(*SHARED), held, MIN_NEW)
    return chi_square_pvalue(encode(seqs), law)


@pytest.mark.parametrize("name", ["ar", "chain", "tree", "ssd"])
@pytest.mark.optimized
def test_min_tokens_keeps_the_law(pair, held, name):
    p = shared_pvalue(pair, held, name, seed=21)
    assert p > THRESHOLD, f"{name}: p-value {p:.3g}"


@pytest.mark.optimized
def test_min_tokens_keeps_the_law_in_the_engines_rows(pair, held):
    """Settings per row (the engine's SamplingParams), each step at SCHEDULE's γ."""
    seqs = run_engine_rows(pair, hold_params(ROWS, held), N, M, GAMMA, SCHEDULE, seed=5)
    law = exact_law(pair[0], PROMPT, M, SamplingParams.make(*ROWS), held, MIN_NEW)
    pvalue = chi_square_pvalue(encode(seqs), law)
    assert pvalue > THRESHOLD, f"p-value {pvalue:.3g}"


@pytest.mark.optimized
def test_power_a_round_that_holds_from_its_start_is_caught(pair, held, break_with):
    def from_start(logits, sp, made=None):  # every position counted as the round's first
        return sampling_probs(logits, sp, None if made is None else made[..., :1])

    break_with(nanospec.speculative, "sampling_probs", from_start)
    p = shared_pvalue(pair, held, "chain", seed=21)
    assert p < POWER, f"p-value {p:.3g}: a hold that ignores the position in the round passed"
