"""Layer 5 — the shipped models, with and without speculation: a two-sample test.

From the prompt "Q: What is the capital of" (high entropy: any of ~190 countries can follow),
N = 8,000 two-token continuations are sampled at T = 1 by plain autoregressive decoding and
N = 8,000 by speculative decoding with the shipped draft (γ = 4). A chi-square test of
homogeneity on the 2 × K table of continuation counts (continuations seen fewer than 20 times
in both samples together are pooled into one column) must not reject: p-value > 1e-4, so the
false-failure probability is 1e-4. Power check in the same test: the draft's own samples
(a different law) are rejected with p < 1e-12 by the same statistic.
"""

from collections import Counter

import jax
import numpy as np
import pytest
from scipy import stats

from nanospec.decode import Bundle
from nanospec.drafters import DraftModel
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


@pytest.mark.slow
def test_speculative_samples_match_autoregressive_samples():
    bundle = Bundle.load(SHIPPED, ["target", "draft"])
    cfg, g, p = bundle.models["target"]
    dcfg, dg, dp = bundle.models["draft"]
    sp = SamplingParams.make(1.0)
    ids = bundle.tok.encode_prompt(PROMPT)

    def ar(key, n, model=(cfg, g, p)):
        tokens, lengths = pad_prompts([ids] * n, cfg.n_ctx)
        return generate(model[1], model[2], model[0], tokens, lengths, key, sp, M, -1)[0]

    def spec(key, n):
        tokens, lengths = pad_prompts([ids] * n, cfg.n_ctx)
        return generated(speculative_generate(g, p, cfg, DraftModel(dg, dcfg), dp, tokens, lengths,
                                              key, sp, M, -1, GAMMA), lengths)

    a = _sample(ar, N, CHUNK, seed=1)
    s = _sample(spec, N, CHUNK, seed=2)
    d = _sample(lambda key, n: ar(key, n, model=(dcfg, dg, dp)), N, CHUNK, seed=3)
    assert homogeneity_pvalue(a, s) > 1e-4
    assert homogeneity_pvalue(a, d) < 1e-12  # the same test tells different laws apart
