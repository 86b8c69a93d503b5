"""The model and its KV cache: every call shape agrees with a full recompute.

Equivalence tests (cached vs uncached) for the three call shapes — prefill, one-token decode,
a multi-token verify block — plus rollback, ragged rows, and the hidden-state tap.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.cache import attention_mask, rollback
from nanospec.checkpoint import state_to_tensors
from nanospec.model import GPT, ModelConfig, forward

ATOL = 2e-5  # float32: cached and full paths sum in different orders


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.tiny(vocab_size=50, n_ctx=32)
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(3)))
    return cfg, graphdef, params


def _tokens(B, T, V, seed=0):
    return jax.random.randint(jax.random.key(seed), (B, T), 0, V)


def _positions(B, T, start=0):
    return jnp.broadcast_to(jnp.arange(start, start + T), (B, T))


def test_cached_prefill_decode_and_block_match_full_recompute(model):
    cfg, g, p = model
    B, T = 2, 20
    toks = _tokens(B, T, cfg.vocab_size)
    full, _, _ = forward(g, p, toks, _positions(B, T))  # (B, T, V), no cache at all
    cache = GPT(cfg, nnx.Rngs(0)).empty_cache(B)
    pieces = []
    # prefill 8, decode 1, verify a block of 5, decode 1, block of 5
    start = 0
    for n in (8, 1, 5, 1, 5):
        logits, _, cache = forward(g, p, toks[:, start : start + n], _positions(B, n, start), cache)
        pieces.append(logits)
        start += n
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=ATOL)
    assert cache.length.tolist() == [T, T]


def test_rollback_then_redecode_equals_fresh_prefill(model):
    cfg, g, p = model
    B = 2
    prompt = _tokens(B, 6, cfg.vocab_size, seed=1)
    wrong = _tokens(B, 4, cfg.vocab_size, seed=2)  # e.g. rejected drafts
    right = _tokens(B, 4, cfg.vocab_size, seed=3)
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(B)
    _, _, cache = forward(g, p, prompt, _positions(B, 6), empty)
    _, _, cache = forward(g, p, wrong, _positions(B, 4, 6), cache)  # writes stale slots 6..9
    cache = rollback(cache, jnp.array([6, 6]))
    after_rollback, _, _ = forward(g, p, right, _positions(B, 4, 6), cache)
    fresh, _, _ = forward(g, p, jnp.concatenate([prompt, right], 1), _positions(B, 10), empty)
    np.testing.assert_allclose(after_rollback, fresh[:, 6:], atol=ATOL)


def test_stale_slots_beyond_the_block_are_invisible(model):
    """Roll back 4 slots but write only 1: the 3 stale slots after it must not leak in."""
    cfg, g, p = model
    toks = _tokens(1, 10, cfg.vocab_size, seed=4)
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(1)
    _, _, cache = forward(g, p, toks, _positions(1, 10), empty)
    cache = rollback(cache, jnp.array([6]))
    x = jnp.array([[7]])
    one, _, _ = forward(g, p, x, _positions(1, 1, 6), cache)
    fresh, _, _ = forward(g, p, jnp.concatenate([toks[:, :6], x], 1), _positions(1, 7), empty)
    np.testing.assert_allclose(one[:, 0], fresh[:, 6], atol=ATOL)


def test_ragged_rows_each_match_their_own_recompute(model):
    """Rows at different lengths in one batch (what batched speculation produces)."""
    cfg, g, p = model
    a, b = _tokens(1, 9, cfg.vocab_size, seed=5), _tokens(1, 9, cfg.vocab_size, seed=6)
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(2)
    _, _, cache = forward(g, p, jnp.concatenate([a, b])[:, :8], _positions(2, 8), empty)
    cache = rollback(cache, jnp.array([8, 5]))  # row 1 keeps only 5 tokens
    nxt = jnp.array([[a[0, 8]], [b[0, 5]]])
    pos = jnp.array([[8], [5]])
    logits, _, cache = forward(g, p, nxt, pos, cache)
    full_a, _, _ = forward(g, p, a, _positions(1, 9))
    full_b, _, _ = forward(g, p, b[:, :6], _positions(1, 6))
    np.testing.assert_allclose(logits[0, 0], full_a[0, 8], atol=ATOL)
    np.testing.assert_allclose(logits[1, 0], full_b[0, 5], atol=ATOL)
    assert cache.length.tolist() == [9, 6]


def test_attention_mask_worked_example():
    m = attention_mask(jnp.array([2]), T=2, S=5, block_mask=None)
    assert m[0].astype(int).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]


def test_block_mask_hides_a_sibling(model):
    """A tree block: token 2 may see the prefix and itself but not token 1 (its sibling)."""
    cfg, g, p = model
    prefix, x = _tokens(1, 5, cfg.vocab_size, seed=7), jnp.array([[3, 4, 5]])
    tree = jnp.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)  # 1 and 2 are both children of 0
    pos = jnp.array([[5, 6, 6]])  # depth-based positions
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(1)
    _, _, cache = forward(g, p, prefix, _positions(1, 5), empty)
    tree_logits, _, _ = forward(g, p, x, pos, cache, block_mask=tree)
    path = jnp.concatenate([prefix, x[:, [0, 2]]], 1)
    full, _, _ = forward(g, p, path, _positions(1, 7))
    np.testing.assert_allclose(tree_logits[0, 2], full[0, 6], atol=ATOL)


def test_hidden_is_the_chosen_layers_residual_stream(model):
    cfg, g, p = model
    toks = _tokens(1, 4, cfg.vocab_size)
    _, last, _ = forward(g, p, toks, _positions(1, 4))
    _, first, _ = forward(g, p, toks, _positions(1, 4), layer=0)
    assert last.shape == first.shape == (1, 4, cfg.d_model)
    assert not np.allclose(last, first)
    # the tied output layer applied to the final hidden state gives the logits
    m = nnx.merge(g, p)
    logits, _, _ = forward(g, p, toks, _positions(1, 4))
    np.testing.assert_allclose(m.wte.attend(m.ln_f(last)), logits, atol=ATOL)


def test_parameter_names_map_one_to_one_onto_gpt2(model):
    cfg, _, p = model
    names = state_to_tensors(p)
    C = cfg.d_model
    assert names["wte.weight"].shape == (cfg.vocab_size, C)
    assert names["wpe.weight"].shape == (cfg.n_ctx, C)
    assert names["h.0.attn.c_attn.weight"].shape == (C, 3 * C)
    assert names["h.1.mlp.c_proj.weight"].shape == (4 * C, C)
    assert {"ln_f.weight", "ln_f.bias", "h.0.ln_1.weight", "h.0.ln_2.bias"} <= set(names)
    assert len(names) == 2 + 2 + cfg.n_layer * 12  # wte, wpe, ln_f (2), 12 tensors per block


def test_presets_have_the_documented_sizes():
    t, d = ModelConfig.target(), ModelConfig.draft()
    assert (t.n_layer, t.d_model, d.n_layer, d.d_model) == (6, 384, 2, 128)
    assert hash(t) != hash(d)  # frozen dataclasses: usable as static jit arguments


DIMS = (((2,), (0,)), ((), ()))  # x (B, T, d_in) @ W (d_in, d_out), as nnx.Linear asks


def test_one_row_is_two_half_products_that_add_up_to_the_plain_one(monkeypatch):
    import nanospec.model as model_module

    w = jax.random.normal(jax.random.key(1), (384, 1536))
    one, eight = (jax.random.normal(jax.random.key(2), (1, t, 384)) for t in (1, 8))
    plain = jax.lax.dot_general(one, w, DIMS)
    monkeypatch.setattr(model_module, "cores", lambda: 2)
    split = model_module.one_row_dot(one, w, DIMS)
    # the halves' sums are added in another order: float32 rounding of |x|·|W|, no more
    bound = 4 * np.finfo(np.float32).eps * float(jnp.max(jnp.abs(one) @ jnp.abs(w)))
    assert split.shape == plain.shape and 0 < float(jnp.max(jnp.abs(split - plain))) < bound
    # a block of rows, and one core, take the plain product itself
    assert jnp.array_equal(model_module.one_row_dot(eight, w, DIMS), eight @ w)
    monkeypatch.setattr(model_module, "cores", lambda: 1)
    assert jnp.array_equal(model_module.one_row_dot(one, w, DIMS), plain)


def test_a_one_token_pass_computes_its_products_as_batches_of_two(model, monkeypatch):
    import nanospec.model as model_module

    monkeypatch.setattr(model_module, "cores", lambda: 2)
    cfg, g, p = model
    tokens, positions = jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32)
    # traced afresh (the jitted `forward` may hold a program traced with the real core count)
    hlo = jax.jit(lambda p: nnx.merge(g, p)(tokens, positions)[0]).lower(p).as_text()
    halves = hlo.count(f"tensor<2x1x{cfg.d_model // 2}xf32>")  # x's two halves, one a product
    assert halves >= 2 * cfg.n_layer  # c_attn and c_fc read d_model inputs in every block


def test_a_one_token_pass_split_over_two_cores_moves_the_logits_by_rounding_only(monkeypatch):
    import nanospec.model as model_module

    cfg = ModelConfig.tiny(vocab_size=50, n_ctx=32)
    g, p = nnx.split(GPT(cfg, nnx.Rngs(4)))
    tokens, positions = _tokens(1, 1, cfg.vocab_size), _positions(1, 1, 0)

    def logits(n_cores):  # traced afresh, with the core count the split reads
        monkeypatch.setattr(model_module, "cores", lambda: n_cores)
        return jax.jit(lambda p: nnx.merge(g, p)(tokens, positions)[0])(p)

    split, plain = logits(2), logits(1)
    assert 0 < float(jnp.max(jnp.abs(split - plain))) < ATOL
