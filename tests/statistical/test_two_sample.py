"""Layer 5 — the shipped models, with and without speculation: a two-sample test.

From the prompt "Q: What is the capital of" (high entropy: any of ~190 countries can follow),
N = 8,000 two-token continuations are sampled at T = 1 by plain autoregressive decoding and
N = 8,000 by speculative decoding (γ = 2: a round can accept both, emit a bonus and be cut
back to two) with each drafter: the shipped draft model, prompt
lookup, and the shipped Medusa, EAGLE and MTP heads. A chi-square test of homogeneity on the
2 × K table of continuation counts (continuations seen fewer than 20 times in both samples
together are pooled into one column) must not reject: p-value > 1e-4, so the false-failure
probability is 1e-4 per drafter (5e-4 for the five). Power check: the draft model's own
samples (a different law) are rejected with p < 1e-12 by the same statistic.

The cost is N prompt passes per sample, so the prompts go in unpadded (8 tokens, not a
16-token bucket), and the runs use a 32-slot context instead of 256: the prompt and its
continuations fit, and the weights and laws are the shipped models' own (empty cache slots are
masked out either way).
"""

import dataclasses
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from nanospec.decode import EVERYTHING, METHODS, Bundle
from nanospec.generate import generate
from nanospec.sampling import SamplingParams
from nanospec.rounds import generated
from nanospec.speculative import Speculator
from tests.conftest import SHIPPED

N, M, GAMMA, CHUNK, CTX = 8_000, 2, 2, 2_000, 32
PROMPT = "Q: What is the capital of"


def homogeneity_pvalue(a: list[tuple], b: list[tuple], min_count: int = 20) -> float:
    count_a, count_b = Counter(a), Counter(b)
    keys = sorted(set(a) | set(b))
    ca = np.array([count_a[k] for k in keys])
    cb = np.array([count_b[k] for k in keys])
    big = ca + cb >= min_count
    table = np.array([np.append(ca[big], ca[~big].sum()), np.append(cb[big], cb[~big].sum())])
    table = table[:, table.sum(0) > 0]
    return float(stats.chi2_contingency(table).pvalue)


def _sample(fn, n: int, chunk: int, seed: int) -> list[tuple]:
    """n draws in chunks (every row holds its own KV caches)."""
    out = []
    for c in range(0, n, chunk):
        out += [tuple(s) for s in fn(jax.random.fold_in(jax.random.key(seed), c), min(chunk, n - c))]
    return out


@pytest.fixture(scope="module")
def reference():
    """The shipped bundle, the prompt, and N autoregressive samples (shared by every drafter)."""
    bundle = Bundle.load(SHIPPED, EVERYTHING)
    for name in ("target", "draft"):  # the short context (see the docstring)
        cfg, g, p = bundle.models[name]
        bundle.models[name] = (dataclasses.replace(cfg, n_ctx=CTX), g, p)
    ids = bundle.tok.encode_prompt(PROMPT)
    return bundle, ids, _sample(lambda key, n: _ar(bundle.models["target"], ids, key, n), N, CHUNK, seed=1)


def unpadded(ids: list[int], n: int):
    return jnp.asarray([ids] * n, jnp.int32), jnp.full(n, len(ids), jnp.int32)


def _ar(model, ids, key, n):
    cfg, g, p = model
    tokens, lengths = unpadded(ids, n)
    return generate(g, p, cfg, tokens, lengths, key, SamplingParams.make(1.0), M, -1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS if m != "ar"])
def test_speculative_samples_match_autoregressive_samples(reference, method):
    bundle, ids, a = reference
    cfg, g, p = bundle.models["target"]
    drafter, dparams = bundle.drafter(method)
    speculator = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=GAMMA, eos_id=-1)

    def spec(key, n):
        tokens, lengths = unpadded(ids, n)
        state, _ = speculator.run(p, dparams, tokens, lengths, key, SamplingParams.make(1.0), M)
        return generated(state, lengths)

    assert homogeneity_pvalue(a, _sample(spec, N, CHUNK, seed=2)) > 1e-4


@pytest.mark.slow
def test_the_two_sample_test_tells_different_laws_apart(reference):
    bundle, ids, a = reference
    d = _sample(lambda key, n: _ar(bundle.models["draft"], ids, key, n), N, CHUNK, seed=3)
    assert homogeneity_pvalue(a, d) < 1e-12  # the draft model's own law is rejected
