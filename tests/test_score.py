"""score.score: the target's log-probabilities of a text, as OpenAI's `logprobs` reports them.

Checked two ways: against one forward pass per prefix (the definition, with nothing padded or
batched), and against the laws the speculative loop's verify pass used at T = 1 for the tokens
it emitted — accepted drafts, residual and bonus tokens alike."""

import jax
import numpy as np
import pytest
from flax import nnx

from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.generate import pad_prompts
from nanospec.model import GPT, ModelConfig, forward
from nanospec.sampling import SamplingParams
from nanospec.score import MOST_TOP, score
from nanospec.speculative import Speculator


@pytest.fixture(scope="module")
def models():
    cfg = ModelConfig.tiny(vocab_size=40, n_ctx=48)
    dcfg = ModelConfig(name="tiny-draft", vocab_size=40, n_ctx=48, n_layer=1, n_head=2, d_model=16)
    return (cfg, *nnx.split(GPT(cfg, nnx.Rngs(0)))), (dcfg, *nnx.split(GPT(dcfg, nnx.Rngs(1))))


def test_each_logprob_is_the_law_after_its_prefix(models):
    (cfg, g, p), _ = models
    ids = [3, 17, 5, 5, 29, 0, 11, 38, 2]
    s = score(g, p, cfg, ids, top=4)
    assert np.isnan(s.logprobs[0]) and s.top_ids.shape == (len(ids), 4)
    full, _, _ = forward(g, p, np.asarray([ids]), np.arange(len(ids))[None])  # unpadded
    for i in range(1, len(ids)):
        law = np.asarray(jax.nn.log_softmax(full[0, i - 1]))
        if i in (1, 5):  # and, for two of them, the prefix alone: nothing after it counts
            alone, _, _ = forward(g, p, np.asarray([ids[:i]]), np.arange(i)[None])
            np.testing.assert_allclose(jax.nn.log_softmax(alone[0, -1]), law, atol=1e-5)
        assert s.logprobs[i] == pytest.approx(law[ids[i]], abs=1e-5)
        assert s.top_ids[i].tolist() == np.argsort(-law)[:4].tolist()
        np.testing.assert_allclose(s.top_logprobs[i], np.sort(law)[::-1][:4], atol=1e-5)


def test_logprobs_are_the_verify_pass_laws_for_every_emitted_token(models):
    """At T = 1 (no cuts) the loop's p is the model's own law: each emitted token's p — an
    accepted draft's p(x), or the residual or bonus token's p — is exp(its score)."""
    (cfg, g, p), (dcfg, dg, dp) = models
    prompt = [1, 2, 3, 4]
    tokens, lengths = pad_prompts([prompt], cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=3, eos_id=-1)
    text, seen, accepted, resampled = list(prompt), [], 0, 0
    for rnd in spec.rounds(p, dp, tokens, lengths, jax.random.key(3), SamplingParams.make(1.0), 40):
        t = jax.tree.map(lambda x: np.asarray(x)[0], rnd.trace)
        n, emitted = int(t.verdict.n_accepted), t.emitted[: int(t.n_emitted)].tolist()
        probs = [*t.verdict.p_x[:n], t.token_p][: len(emitted)]
        seen += [(len(text) + i, pr) for i, pr in enumerate(probs)]
        text += emitted
        accepted, resampled = accepted + n, resampled + (not t.verdict.is_bonus)
    assert accepted > 5 and resampled > 0  # accepted drafts and residual tokens both checked
    s = score(g, p, cfg, text)
    for at, pr in seen:
        assert np.exp(s.logprobs[at]) == pytest.approx(float(pr), rel=1e-4, abs=1e-6), at


def test_top_reaches_most_top_and_bad_requests_are_refused(models):
    (cfg, g, p), _ = models
    assert score(g, p, cfg, [5], top=MOST_TOP).top_ids.shape == (1, MOST_TOP)
    with pytest.raises(UserError, match="1 to 48 tokens"):
        score(g, p, cfg, [])
    with pytest.raises(UserError, match="top must be 0 to 20"):
        score(g, p, cfg, [1, 2], top=21)
