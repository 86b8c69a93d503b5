"""Autoregressive generation: drivers agree, stopping rules hold, nothing recompiles.

Equivalence (fused while_loop vs step-wise generator; cached greedy vs full-recompute greedy),
invariants (EOS, max_new_tokens, a full cache, row independence) and a compile-count test.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanospec.aot import programs_compiled
from nanospec.errors import UserError
from nanospec.generate import bucket, generate, pad_prompts, stream
from nanospec.model import forward
from nanospec.rounds import _fused, _settle_jit
from nanospec.sampling import GREEDY, SamplingParams

HOT = SamplingParams.make(1.0)


def _run(model, prompts, sp=HOT, max_new=10, eos=-1, seed=0):
    cfg, g, p = model
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    outs, state = generate(g, p, cfg, tokens, lengths, jax.random.key(seed), sp, max_new, eos)
    return outs, state


def test_bucket_sizes():
    assert [bucket(n, 256) for n in (1, 16, 17, 33, 200, 255)] == [16, 16, 32, 64, 256, 256]


def test_fused_and_streaming_drivers_give_the_same_tokens(tiny_model):
    cfg, g, p = tiny_model
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9]]
    fused, _ = _run(tiny_model, prompts, max_new=12, seed=7)
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    steps = list(stream(g, p, cfg, tokens, lengths, jax.random.key(7), HOT, 12, -1))
    streamed = [[int(s[b]) for s in steps if s[b] >= 0] for b in range(2)]
    assert streamed == fused
    assert all(len(o) == 12 for o in fused)


def test_greedy_with_cache_equals_greedy_by_full_recompute(tiny_model):
    cfg, g, p = tiny_model
    prompt = [5, 9, 2, 7]
    outs, _ = _run(tiny_model, [prompt], sp=GREEDY, max_new=8)
    seq = list(prompt)
    width = len(prompt) + 8  # one shape, so one compiled pass: positions after the text are
    full = jax.jit(lambda x: forward(g, p, x, jnp.arange(width)[None])[0])  # causal: unseen
    for _ in range(8):  # the slow, obviously-correct way: re-run everything each token
        logits = full(jnp.array([seq + [0] * (width - len(seq))]))
        seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
    assert outs[0] == seq[len(prompt) :]


def test_stops_right_after_eos_and_keeps_it(tiny_model):
    first, _ = _run(tiny_model, [[1, 2, 3]], sp=GREEDY, max_new=5)
    eos = first[0][0]  # declare the first greedy token to be EOS
    outs, state = _run(tiny_model, [[1, 2, 3]], sp=GREEDY, max_new=5, eos=eos)
    assert outs == [[eos]] and bool(state.done[0])


def test_max_new_tokens_and_a_full_cache_both_stop_a_row(tiny_model):
    cfg = tiny_model[0]
    long_prompt = list(range(1, cfg.n_ctx - 3))  # leaves room for exactly 4 tokens
    outs, _ = _run(tiny_model, [[1, 2], long_prompt], max_new=9)
    assert [len(o) for o in outs] == [9, cfg.n_ctx - len(long_prompt)]


def test_a_rows_tokens_do_not_depend_on_the_batch(tiny_model):
    alone, _ = _run(tiny_model, [[3, 1, 4, 1, 5]], seed=3)
    together, _ = _run(tiny_model, [[3, 1, 4, 1, 5], [9, 2, 6]], seed=3)
    assert together[0] == alone[0]


def test_samples_of_one_prompt_are_independent_draws(tiny_model):
    outs, _ = _run(tiny_model, [[1, 2, 3]] * 8, max_new=6, seed=11)
    assert len({tuple(o) for o in outs}) > 1  # an untrained model is close to uniform


def test_no_recompile_within_a_bucket_or_across_steps_or_settings(tiny_model, compile_afresh):
    cfg, g, p = tiny_model
    B = 5  # a batch size no other test uses, so this test owns its cache entries
    before = programs_compiled(_fused)
    for n, sp, max_new in [(3, HOT, 4), (9, GREEDY, 7), (16, SamplingParams.make(0.7, 5, 0.9), 2)]:
        tokens, lengths = pad_prompts([list(range(1, n + 1))] * B, cfg.n_ctx)
        generate(g, p, cfg, tokens, lengths, jax.random.key(n), sp, max_new, -1)
    assert programs_compiled(_fused) == before + 1  # three prompt lengths, one bucket (16)
    tokens, lengths = pad_prompts([list(range(1, 18))] * B, cfg.n_ctx)
    generate(g, p, cfg, tokens, lengths, jax.random.key(0), HOT, 2, -1)
    assert programs_compiled(_fused) == before + 2  # 17 tokens: the next bucket (32)

    step_before = programs_compiled(_settle_jit)
    for _ in stream(g, p, cfg, tokens, lengths, jax.random.key(0), HOT, 6, -1):
        pass
    for _ in stream(g, p, cfg, tokens, lengths, jax.random.key(1), GREEDY, 4, -1):
        pass
    assert programs_compiled(_settle_jit) == step_before + 1  # ten decode steps, one program


def test_bad_prompts_are_user_errors(tiny_model):
    cfg = tiny_model[0]
    with pytest.raises(UserError, match="empty"):
        pad_prompts([[]], cfg.n_ctx)
    with pytest.raises(UserError, match="context"):
        pad_prompts([list(range(cfg.n_ctx))], cfg.n_ctx)
    with pytest.raises(UserError):
        _run(tiny_model, [[1]], max_new=0)


def test_padding_tokens_do_not_change_the_result(tiny_model):
    """Right-padding must be invisible: the pad id used does not matter."""
    cfg, g, p = tiny_model
    for pad in (0, 17):
        tokens, lengths = pad_prompts([[4, 8, 15]], cfg.n_ctx, pad_id=pad)
        outs, _ = generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, 6, -1)
        if pad == 0:
            ref = outs
    assert outs == ref
    assert np.all(np.asarray(tokens)[0, 3:] == 17)
