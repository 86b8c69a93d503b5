"""The speculative loop: drivers agree, greedy equals autoregressive, limits hold, no recompiles.

Equivalence (fused while_loop vs step-wise generator; greedy speculative vs greedy
autoregressive on tiny models), invariants (EOS, max_new_tokens, the cache's headroom, row
independence in a ragged batch, counters) and a compile-count test. The distributional tests
live in tests/statistical/.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from nanospec.aot import programs_compiled
from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.generate import generate, pad_prompts
from nanospec.model import GPT, ModelConfig
from nanospec.rounds import _fused, _settle_jit, generated
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator

HOT = SamplingParams.make(0.9, 0, 0.95)


@pytest.fixture(scope="module")
def models():
    cfg = ModelConfig.tiny(vocab_size=40, n_ctx=48)
    target = (cfg, *nnx.split(GPT(cfg, nnx.Rngs(0))))
    dcfg = ModelConfig(name="tiny-draft", vocab_size=40, n_ctx=48, n_layer=1, n_head=2, d_model=16)
    draft = (dcfg, *nnx.split(GPT(dcfg, nnx.Rngs(1))))
    return target, draft


def _spec(models, prompts, sp=HOT, gamma=3, max_new=12, eos=-1, seed=0, draft=None):
    (cfg, g, p), (dcfg, dg, dp) = models[0], draft or models[1]
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=gamma, eos_id=eos)
    state, stats = spec.run(p, dp, tokens, lengths, jax.random.key(seed), sp, max_new)
    return generated(state, lengths), state, stats


PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]]


@pytest.mark.parametrize(
    "gamma", [1, pytest.param(2, marks=pytest.mark.repeat(reason="between γ = 1 and 5")), 5]
)
def test_greedy_speculative_equals_greedy_autoregressive(models, gamma):
    cfg, g, p = models[0]
    tokens, lengths = pad_prompts(PROMPTS, cfg.n_ctx)
    ar, _ = generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, 15, -1)
    spec, *_ = _spec(models, PROMPTS, GREEDY, gamma, max_new=15)
    assert spec == ar


def test_fused_and_stepwise_drivers_give_the_same_tokens(models):
    (cfg, g, p), (dcfg, dg, dp) = models
    fused, *_ = _spec(models, PROMPTS, seed=5)
    tokens, lengths = pad_prompts(PROMPTS, cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=3, eos_id=-1)
    rounds = list(spec.rounds(p, dp, tokens, lengths, jax.random.key(5), HOT, 12))
    assert generated(rounds[-1].state, lengths) == fused
    assert all(len(o) == 12 for o in fused)


def test_a_draft_identical_to_the_target_is_always_accepted(models):
    outs, _, stats = _spec(
        models, PROMPTS, SamplingParams.make(1.0), gamma=4, max_new=20, draft=models[0]
    )
    hist = np.asarray(stats.hist)
    assert hist[:, :4].sum() == 0  # every round accepted all 4 drafts, then a bonus
    assert [len(o) for o in outs] == [20, 20]


def test_a_rows_output_does_not_depend_on_the_batch(models):
    alone, *_ = _spec(models, [PROMPTS[0]], seed=9)
    together, *_ = _spec(models, [PROMPTS[0], PROMPTS[1], [7, 7]], seed=9)
    assert together[0] == alone[0]


def test_stops_right_after_eos(models):
    first, *_ = _spec(models, [[1, 2, 3]], GREEDY, max_new=6)
    eos = first[0][2]  # declare the third greedy token to be EOS
    outs, state, _ = _spec(models, [[1, 2, 3]], GREEDY, max_new=6, eos=eos)
    assert outs[0] == first[0][: first[0].index(eos) + 1]
    assert bool(state.done[0])


@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_never_emits_past_max_new_tokens_even_with_a_bonus(models, max_new):
    outs, *_ = _spec(models, PROMPTS, gamma=5, max_new=max_new, draft=models[0])  # all accepted
    assert [len(o) for o in outs] == [max_new, max_new]


@pytest.mark.parametrize("gamma", [1, 4, 7])
def test_a_row_near_the_context_end_fills_it_like_autoregressive_decoding(models, gamma):
    # Room for 5 tokens, fewer than a γ+1 block at γ = 7: the last rounds draft less, and
    # the row still ends exactly at the context's end, where AR ends (no EOS: eos_id = -1).
    cfg = models[0][0]
    prompt = list(range(1, cfg.n_ctx - 4))
    for draft in (None, models[0]):  # rejections, and (drafting with the target) none
        outs, state, _ = _spec(models, [prompt, prompt[:5]], gamma=gamma, max_new=30, draft=draft)
        assert len(prompt) + len(outs[0]) == cfg.n_ctx and bool(state.done[0])
        assert len(outs[1]) == 30


def test_counters_add_up(models):
    outs, _, stats = _spec(models, PROMPTS, gamma=3, max_new=12)
    hist = np.asarray(stats.hist)  # (B, γ+1)
    rounds = hist.sum(1)
    accepted = (hist * np.arange(4)).sum(1)
    # every round emits its accepted drafts plus one token, except a final round cut short
    assert np.all(accepted + rounds >= [len(o) for o in outs])
    assert np.all(rounds >= 1)


def test_bad_settings_are_user_errors(models):
    cfg = models[0][0]
    with pytest.raises(UserError, match="gamma"):
        _spec(models, PROMPTS, gamma=0)
    with pytest.raises(UserError, match="room"):
        _spec(models, [list(range(1, cfg.n_ctx + 1))], gamma=4)
    with pytest.raises(UserError, match="max_new"):
        _spec(models, PROMPTS, max_new=0)


def test_no_recompile_across_prompt_lengths_settings_or_rounds(models, compile_afresh):
    (cfg, g, p), (dcfg, dg, dp) = models
    drafter = DraftModel(dg, dcfg)
    B = 3  # a batch size no other test uses
    before = programs_compiled(_fused)
    for n, sp, max_new in [(3, HOT, 5), (9, GREEDY, 8), (14, SamplingParams.make(0.5, 4, 0.8), 3)]:
        tokens, lengths = pad_prompts([list(range(1, n + 1))] * B, cfg.n_ctx)
        spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=2, eos_id=-1)
        spec.run(p, dp, tokens, lengths, jax.random.key(n), sp, max_new)
    assert programs_compiled(_fused) == before + 1
    verify_before = programs_compiled(_settle_jit)
    for seed in range(2):  # the step-wise driver compiles ahead of time, once
        rounds = list(spec.rounds(p, dp, tokens, lengths, jax.random.key(seed), HOT, 10))
    assert len(rounds) > 1 and programs_compiled(_settle_jit) == verify_before + 1
