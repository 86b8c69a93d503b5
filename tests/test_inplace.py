"""The decode loops update the KV cache in place: no copy of a cache buffer per step.

A copy of the whole cache costs what a fifth of a target decode step does here (12 buffers
of 384 KB), and it hides: the tokens are right, only the clock notices. `lax.cond` around a
pass that writes the cache made XLA copy it twice per round (cache.py, `run_if`). These tests
read the compiled programs (XLA's optimised HLO) and fail if any computation other than the
entry one — the setup before the loop — copies an array of a cache buffer's shape: the
autoregressive loop, every drafter's (their own caches too) and the token-tree loop. A loop
that must copy shows the count can fail.
"""

import re

import jax
import jax.numpy as jnp
import pytest

from nanospec.drafters import PromptLookup
from nanospec.generate import Decoder, pad_prompts
from nanospec.sampling import GREEDY
from nanospec.speculative import Speculator


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
    """A cache buffer's shape, (B·H, S, Dh) (cache.py says why it is laid out so)."""
    return [(batch * cfg.n_head, cfg.n_ctx, cfg.head_dim)]


def _passes(tiny_model):
    """A one-token and a two-token pass that both write the cache, and which one to run."""
    from nanospec.model import forward

    cfg, graphdef, params = tiny_model
    one = lambda c: forward(graphdef, params, jnp.zeros((1, 1), jnp.int32), c.length[:, None], c)[2]
    two = lambda c: forward(
        graphdef, params, jnp.zeros((1, 2), jnp.int32), c.length[:, None] + jnp.arange(2), c
    )[2]
    return one, two, lambda c: c.length[0] % 2 == 0


def _loop_hlo(tiny_model, step, carry):
    cfg = tiny_model[0]
    loop = lambda c: jax.lax.while_loop(lambda c: c[0].length[0] < cfg.n_ctx - 4, step, c)
    return jax.jit(loop).lower(carry).compile().as_text()


def test_the_counter_sees_a_copy_that_must_happen(tiny_model):
    """The check itself can fail: a loop that keeps the cache from before each pass alongside
    the updated one cannot update in place, and the copy it makes is counted."""
    from nanospec.cache import init_cache

    cfg = tiny_model[0]
    one, _, _ = _passes(tiny_model)
    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx)
    hlo = _loop_hlo(tiny_model, lambda c: (one(c[0]), c[0]), (cache, cache))
    assert copies_in_loop(hlo, cache_shape(cfg)) > 0


def test_run_if_branches_on_the_cache_without_copying(tiny_model):
    """The choice target_pass makes, written with run_if. (Written with lax.cond, it copied
    the cache on the XLA this was measured with: cache.py.)"""
    from nanospec.cache import init_cache, run_if

    cfg = tiny_model[0]
    one, two, pick = _passes(tiny_model)

    def step(carry):
        c = carry[0]
        return (run_if(~pick(c), one, run_if(pick(c), two, c)),)

    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx)
    assert copies_in_loop(_loop_hlo(tiny_model, step, (cache,)), cache_shape(cfg)) == 0


def test_autoregressive_loop_copies_no_cache(tiny_model):
    cfg, graphdef, params = tiny_model
    tokens, lengths = pad_prompts([[1, 2, 3]], cfg.n_ctx)
    program, _ = Decoder(graphdef=graphdef, cfg=cfg, eos_id=-1).program(
        params, (), tokens, lengths, jax.random.key(0), GREEDY
    )
    hlo = program.as_text()
    assert copies_in_loop(hlo, cache_shape(cfg)) == 0


@pytest.mark.parametrize("skip_unmatched", [True, False])
def test_prompt_lookup_loop_copies_no_cache(tiny_model, skip_unmatched):
    """Prompt lookup's rounds choose between a one-token and a (γ+1)-token target pass."""
    cfg, graphdef, params = tiny_model
    tokens, lengths = pad_prompts([[1, 2, 3, 1, 2]], cfg.n_ctx)
    drafter = PromptLookup(cfg.vocab_size, skip_unmatched=skip_unmatched)
    spec = Speculator(graphdef=graphdef, cfg=cfg, drafter=drafter, gamma=3, eos_id=-1)
    program, _ = spec.program(params, (), tokens, lengths, jax.random.key(0), GREEDY)
    hlo = program.as_text()
    assert copies_in_loop(hlo, cache_shape(cfg)) == 0


@pytest.mark.parametrize("method", ["draft", "medusa", "eagle", "mtp", "tree"])
def test_every_drafters_loop_copies_no_cache(tiny_ckpt_dir, method):
    """The model drafters keep caches of their own (the draft model, EAGLE's layer): neither
    theirs nor the target's is copied; nor in the token-tree loop, which moves the accepted
    path's K/V into place every round."""
    from nanospec.decode import Bundle
    from nanospec.trees.loop import TreeSpeculator
    from nanospec.trees.tree import Tree

    bundle = Bundle.load(tiny_ckpt_dir, ("target", "draft", "medusa", "eagle", "mtp"))
    cfg, graphdef, params = bundle.models["target"]
    tokens, lengths = pad_prompts([[1, 2, 3, 1, 2]], cfg.n_ctx)
    drafter, dparams = bundle.drafter("draft" if method == "tree" else method)
    fixed = dict(graphdef=graphdef, cfg=cfg, drafter=drafter, eos_id=-1)
    spec = (
        TreeSpeculator(tree=Tree.from_branching((2, 1)), top=True, **fixed)
        if method == "tree"
        else Speculator(gamma=2, **fixed)
    )
    program, _ = spec.program(params, dparams, tokens, lengths, jax.random.key(0), GREEDY)
    shapes = cache_shape(cfg) + cache_shape(bundle.models["draft"][0])
    if method == "eagle":
        head = bundle.drafter("eagle")[0].hc.block_config()
        shapes.append((1, head.n_ctx, head.n_head, head.head_dim))
    assert copies_in_loop(program.as_text(), shapes) == 0
