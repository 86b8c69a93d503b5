"""The decode loops update the KV cache in place: no copy of a cache buffer per step.

A copy of the whole cache costs what a fifth of a target decode step does here (12 buffers
of 384 KB), and it hides: the tokens are right, only the clock notices. `lax.cond` around a
pass that writes the cache made XLA copy it twice per round (cache.py, `run_if`). These tests
read the compiled programs (XLA's optimised HLO) and fail if any computation other than the
entry one — the setup before the loop — copies an array of a cache buffer's shape.
"""

import re

import jax
import jax.numpy as jnp
import pytest

from nanospec.drafters import PromptLookup
from nanospec.generate import _generate, pad_prompts
from nanospec.sampling import GREEDY
from nanospec.speculative import _fused


def copies_in_loop(hlo: str, shapes: list[tuple[int, ...]]) -> int:
    """How many `copy` ops of f32[shape], for any of `shapes`, the non-entry computations of
    `hlo` hold (a copy may sit inside a fusion, so every computation is read)."""
    dims = "|".join(",".join(map(str, shape)) for shape in shapes)
    n, in_entry = 0, False
    for line in hlo.splitlines():
        if line.endswith("{") and not line.startswith(" "):  # a computation's header
            in_entry = line.startswith("ENTRY")
        elif not in_entry and re.search(rf"= f32\[({dims})\]\S* copy\(", line):
            n += 1
    return n


def cache_shape(cfg, batch=1):
    """A cache buffer's shape, (B, S, H, Dh).

    Not its transposes: XLA's CPU matmul reads the keys as (B, H, Dh, S), so every pass
    re-lays them out, in a fusion, whatever this code does about branches. (Tried: storing
    them transposed made one-token passes 5-8% faster and passes of 8+ tokens 6-8% slower.)"""
    return [(batch, cfg.n_ctx, cfg.n_head, cfg.head_dim)]


def test_the_counter_sees_the_copies_lax_cond_makes(tiny_model):
    """The check itself can fail: the branch written with lax.cond (as target_pass was: a
    one-token or a two-token pass, both writing the cache) copies the cache; run_if does not."""
    from nanospec.cache import init_cache, run_if
    from nanospec.model import forward
    cfg, graphdef, params = tiny_model

    def passes(cache):
        one = lambda c: forward(graphdef, params, jnp.zeros((1, 1), jnp.int32), c.length[:, None], c)[2]
        two = lambda c: forward(graphdef, params, jnp.zeros((1, 2), jnp.int32),
                                c.length[:, None] + jnp.arange(2), c)[2]
        return one, two, cache.length[0] % 2 == 0

    def with_cond(cache):
        one, two, pred = passes(cache)
        return jax.lax.cond(pred, two, one, cache)

    def with_run_if(cache):
        one, two, pred = passes(cache)
        return run_if(~pred, one, run_if(pred, two, cache))

    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx)
    hlo = lambda step: jax.jit(lambda c: jax.lax.while_loop(lambda c: c.length[0] < 20, step, c)
                               ).lower(cache).compile().as_text()
    assert copies_in_loop(hlo(with_cond), cache_shape(cfg)) > 0
    assert copies_in_loop(hlo(with_run_if), cache_shape(cfg)) == 0


def test_autoregressive_loop_copies_no_cache(tiny_model):
    cfg, graphdef, params = tiny_model
    tokens, lengths = pad_prompts([[1, 2, 3]], cfg.n_ctx)
    hlo = _generate.lower(graphdef, params, cfg, tokens, lengths, jax.random.key(0), GREEDY,
                          jnp.int32(8), -1).compile().as_text()
    assert copies_in_loop(hlo, cache_shape(cfg)) == 0


@pytest.mark.parametrize("skip_unmatched", [True, False])
def test_prompt_lookup_loop_copies_no_cache(tiny_model, skip_unmatched):
    """Prompt lookup's rounds choose between a one-token and a (γ+1)-token target pass."""
    cfg, graphdef, params = tiny_model
    tokens, lengths = pad_prompts([[1, 2, 3, 1, 2]], cfg.n_ctx)
    drafter = PromptLookup(cfg.vocab_size, skip_unmatched=skip_unmatched)
    hlo = _fused.lower(graphdef, params, cfg, drafter, (), tokens, lengths, jax.random.key(0),
                       GREEDY, jnp.int32(8), -1, 3).compile().as_text()
    assert copies_in_loop(hlo, cache_shape(cfg)) == 0
