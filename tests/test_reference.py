"""The reference loop (nanospec/reference.py) and the fast loop emit exactly the same tokens.

Same key, same drafter, same verify rule: the plain Python loop of Algorithm 1 (no cache, no
batch, no jit around it), the fused `lax.while_loop` driver (`Speculator.run`) and the step-wise
driver (`Speculator.rounds`) must agree token for token — for the draft model and prompt
lookup, greedy and at T = 1, and at the context's end, where rounds draft fewer tokens.
(Only float rounding differs between the three — the reference re-reads the whole sequence
instead of using a KV cache — which could flip a draw only when a uniform lands within ~1e-6
of a boundary; these fixed keys do not.)
"""

from pathlib import Path

import jax
import pytest

from nanospec.decode import Bundle
from nanospec.generate import pad_prompts
from nanospec.reference import speculative_sampling
from nanospec.rounds import generated
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"
FACTS = "The capital of France is Paris. The capital of Peru is Lima. The capital of"


@pytest.fixture(scope="module")
def bundle():
    return Bundle.load(SHIPPED, ["target", "draft"])


def three_ways(bundle, method, prompt_ids, gamma, sp, seed, max_new):
    """The tokens of the reference loop, the fused driver and the step-wise driver."""
    target, eos = bundle.models["target"], bundle.tok.eos_id
    cfg, graphdef, params = target
    drafter, dparams = bundle.drafter(method)
    key = jax.random.key(seed)
    reference = speculative_sampling(
        target, drafter, dparams, prompt_ids, gamma, sp, key, max_new, eos
    )
    spec = Speculator(graphdef=graphdef, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=eos)
    tokens, lengths = pad_prompts([prompt_ids], cfg.n_ctx)
    state, _ = spec.run(params, dparams, tokens, lengths, key, sp, max_new)
    *_, last = spec.rounds(params, dparams, tokens, lengths, key, sp, max_new)
    return reference, generated(state, lengths)[0], generated(last.state, lengths)[0]


@pytest.mark.parametrize("method", ["draft", "ngram"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reference_fused_and_stepwise_emit_the_same_tokens(bundle, method, temperature):
    sp = GREEDY if temperature == 0 else SamplingParams.make(temperature)
    prompt_ids = bundle.tok.encode_prompt(FACTS)
    for seed in (0, 1):
        reference, fused, stepwise = three_ways(bundle, method, prompt_ids, 4, sp, seed, 40)
        assert len(reference) >= 8  # 40, or fewer when it sampled <|endoftext|>
        assert reference == fused == stepwise, (method, temperature, seed)


@pytest.mark.parametrize("method", ["draft", "ngram"])
def test_they_agree_at_the_contexts_end(bundle, method):
    """A prompt 6 tokens short of the context: the last rounds draft fewer than γ = 4, and
    every loop stops with the context full (n_ctx tokens), as autoregressive decoding would."""
    cfg = bundle.models["target"][0]
    ids = bundle.tok.encode_prompt(FACTS * 20)[: cfg.n_ctx - 6]
    reference, fused, stepwise = three_ways(bundle, method, ids, 4, SamplingParams.make(1.0), 3, 20)
    assert len(reference) == 6
    assert reference == fused == stepwise
