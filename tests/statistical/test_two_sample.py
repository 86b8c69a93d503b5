"""Layer 5 — the shipped models, with and without speculation: a two-sample test.

From the prompt "Q: What is the capital of" (high entropy: any of ~190 countries can follow),
N = 8,000 two-token continuations are sampled at T = 1 by plain autoregressive decoding and
N = 8,000 by speculative decoding (γ = 4) with each drafter: the shipped draft model, prompt
lookup, and the shipped Medusa, EAGLE and MTP heads. A chi-square test of homogeneity on the
2 × K table of continuation counts (continuations seen fewer than 20 times in both samples
together are pooled into one column) must not reject: p-value > 1e-4, so the false-failure
probability is 1e-4 per drafter (5e-4 for the five). Power check: the draft model's own
samples (a different law) are rejected with p < 1e-12 by the same statistic.
"""

from collections import Counter

import jax
import numpy as np
import pytest
from scipy import stats

from nanospec.decode import EVERYTHING, METHODS, Bundle
from nanospec.generate import generate, pad_prompts
from nanospec.sampling import SamplingParams
from nanospec.speculative import generated, speculative_generate
from tests.conftest import SHIPPED

N, M, GAMMA, CHUNK = 8_000, 2, 4, 800
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
    """n draws in chunks (each row holds a 256-slot KV cache: 12,000 at once would not fit)."""
    out = []
    for c in range(0, n, chunk):
        out += [tuple(s) for s in fn(jax.random.fold_in(jax.random.key(seed), c), min(chunk, n - c))]
    return out


@pytest.fixture(scope="module")
def reference():
    """The shipped bundle, the prompt, and N autoregressive samples (shared by every drafter)."""
    bundle = Bundle.load(SHIPPED, EVERYTHING)
    cfg, g, p = bundle.models["target"]
    ids = bundle.tok.encode_prompt(PROMPT)
    return bundle, ids, _sample(lambda key, n: _ar(bundle.models["target"], ids, key, n), N, CHUNK, seed=1)


def _ar(model, ids, key, n):
    cfg, g, p = model
    tokens, lengths = pad_prompts([ids] * n, cfg.n_ctx)
    return generate(g, p, cfg, tokens, lengths, key, SamplingParams.make(1.0), M, -1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS if m != "ar"])
def test_speculative_samples_match_autoregressive_samples(reference, method):
    bundle, ids, a = reference
    cfg, g, p = bundle.models["target"]
    drafter, dparams = bundle.drafter(method)

    def spec(key, n):
        tokens, lengths = pad_prompts([ids] * n, cfg.n_ctx)
        return generated(speculative_generate(g, p, cfg, drafter, dparams, tokens, lengths, key,
                                              SamplingParams.make(1.0), M, -1, GAMMA), lengths)

    assert homogeneity_pvalue(a, _sample(spec, N, CHUNK, seed=2)) > 1e-4


@pytest.mark.slow
def test_the_two_sample_test_tells_different_laws_apart(reference):
    bundle, ids, a = reference
    d = _sample(lambda key, n: _ar(bundle.models["draft"], ids, key, n), N, CHUNK, seed=3)
    assert homogeneity_pvalue(a, d) < 1e-12  # the draft model's own law is rejected
