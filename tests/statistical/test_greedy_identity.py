"""Layer 4 — greedy identity on the shipped checkpoints: speculative == autoregressive, token by token.

With temperature 0, p and q are one-hot, so the verify rule must reproduce the target's greedy
output exactly, for every γ and every drafter (the draft model, prompt lookup, the shipped
Medusa, EAGLE and MTP heads — at most 4 tokens — and SSD). The default run checks γ = 4 for
every drafter, and SSD with two more settings; the slow layer adds γ = 1 for every drafter,
and `make test-all` γ ∈ {2, 3, 5, 8} for the draft model, 8 for SSD and {3, 8} for the others
(the heads: 3). The only allowed divergence is a *near-tie*: the target scores its
top two tokens within float32 noise of each other, and the block computation of the verify pass
(γ+1 tokens at once) and the one-token decode round differently. The test detects each
divergence, measures the target's top-2 logit gap at that position by a full recompute, and
fails unless the gap is below NEAR_TIE; near-ties are reported (printed and warned), never hidden.
No randomness: false-failure probability 0.
"""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanospec.decode import EVERYTHING, METHODS, Bundle, make_loop
from nanospec.generate import generate, pad_prompts
from nanospec.measure.workloads import workload_prompts
from nanospec.model import forward
from nanospec.rounds import generated
from nanospec.sampling import GREEDY
from nanospec.ssd.fanout import SSDOptions
from tests.conftest import SHIPPED

NEAR_TIE = 1e-3  # logits; float32 block-vs-single differences are ~1e-5 here
MAX_NEW = 40


@pytest.fixture(scope="module")
def setup():
    bundle = Bundle.load(SHIPPED, EVERYTHING)
    cfg, g, p = bundle.models["target"]
    texts = (
        ["The capital of France is"]
        + workload_prompts("facts", 3)
        + workload_prompts("repetitive", 2)
        + workload_prompts("code", 2)
    )
    ids = [bundle.tok.encode_prompt(t) for t in texts]
    tokens, lengths = pad_prompts(ids, cfg.n_ctx)
    ar, _ = generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, MAX_NEW, -1)
    return bundle, ids, tokens, lengths, ar


def top2_gap(model, context: list[int]) -> float:
    cfg, g, p = model
    logits, _, _ = forward(g, p, jnp.asarray([context]), jnp.arange(len(context))[None])
    top = np.sort(np.asarray(logits[0, -1]))[-2:]
    return float(top[1] - top[0])


def _check(setup, gamma, method="draft", ssd=SSDOptions()):
    bundle, ids, tokens, lengths, ar = setup
    p = bundle.models["target"][2]
    spec, dparams = make_loop(bundle, method, gamma, ssd=ssd)
    spec = dataclasses.replace(spec, eos_id=-1)
    state, _ = spec.run(p, dparams, tokens, lengths, jax.random.key(0), GREEDY, MAX_NEW)
    ties = []
    for row, (spec, ref) in enumerate(zip(generated(state, lengths), ar)):
        if spec == ref:
            continue
        t = next(i for i, (a, b) in enumerate(zip(spec, ref)) if a != b)
        gap = top2_gap(bundle.models["target"], ids[row] + ref[:t])
        assert gap < NEAR_TIE, (
            f"{method}, γ={gamma}, prompt {row}: diverged at token {t} although the "
            f"target's top-2 gap is {gap:.2e} (not a near-tie)"
        )
        ties.append((row, t, gap))
    for row, t, gap in ties:
        message = (
            f"near-tie reported: {method}, γ={gamma}, prompt {row}, token {t}, top-2 gap {gap:.2e}"
        )
        print(message)
        warnings.warn(message)
    return ties


SPECULATIVE = [m for m in METHODS if m != "ar"]
HEADS_DEPTH = 4  # Medusa heads / MTP modules shipped


def gammas(method: str) -> list[int]:
    """The slow layer's γ values besides 4: most for the draft model, the ends (and a middle)
    for the other drafters (each γ compiles the 6-layer target's loop afresh, 3-8 s on 2 cores;
    γ = 1..8 for every drafter passed once, and costs ~15 min of CI)."""
    every = (1, 2, 3, 5, 8) if method == "draft" else (1, 8) if method == "ssd" else (1, 3, 8)
    return [g for g in every if g != 4 and (method not in ("medusa", "mtp") or g <= HEADS_DEPTH)]


def every_gamma():
    """γ = 1, the one-draft end (a round's draft loop runs no step), for every drafter in
    `make test`; the other γ run the same code as γ = 4 at another length: `make test-all`."""
    repeat = pytest.mark.repeat(reason="the same loop as γ = 4 at another length")
    return [
        pytest.param(m, g, marks=() if g == 1 else repeat, id=f"{m}-{g}")
        for m in SPECULATIVE
        for g in gammas(m)
    ]


@pytest.mark.parametrize("method", SPECULATIVE)
def test_greedy_identity_gamma_4(setup, method):
    _check(setup, 4, method)


@pytest.mark.slow
@pytest.mark.parametrize("method,gamma", every_gamma())
def test_greedy_identity_every_gamma(setup, method, gamma):
    _check(setup, gamma, method)


@pytest.mark.parametrize(
    "options",
    [SSDOptions("geometric:10", 0.5, "fast"), SSDOptions("2", 1.0, "neural")],
    ids=["geometric10-C0.5-fast", "uniform2-neural"],
)
def test_ssd_greedy_identity(setup, options):
    """SSD at γ = 4 with other fan-outs, Saguaro's C and the fast backup (the test above runs
    its defaults: one branch per k, C = 1, the neural backup)."""
    _check(setup, 4, "ssd", options)
