"""Draft heads: they save and load exactly, they learn from the frozen target, and their
drafting state follows the protocol (the feature at L−2, EAGLE's cache over real pairs)."""

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.checkpoint import load_model, read_manifest, state_to_tensors
from nanospec.compat import get_value
from nanospec.corpus import CorpusConfig
from nanospec.errors import UserError
from nanospec.heads.drafters import DRAFTERS
from nanospec.heads.modules import KINDS, HeadConfig, build, load_head, save_head
from nanospec.model import GPT, ModelConfig, forward
from nanospec.sampling import SamplingParams
from nanospec.training.heads import HeadsTrainConfig, corpus_vocabulary, train_heads
from nanospec.training.lm import TrainConfig, train, train_tokenizer

SMALL_CORPUS = CorpusConfig(n_train_docs=60, n_val_docs=6)


@pytest.mark.parametrize("kind", KINDS)
def test_a_saved_head_loads_back_exactly(tmp_path, kind):
    # EAGLE and MTP narrower than the target (projected back), a draft vocabulary, as shipped.
    hc = HeadConfig(
        kind,
        d_model=32,
        vocab_size=50,
        n_ctx=16,
        depth=3,
        n_head=2,
        width=0 if kind == "medusa" else 16,
        draft_vocab=(0, 3, 7, 49),
    )
    _, params = nnx.split(build(hc, seed=1))
    save_head(tmp_path, hc, params, {"note": "test"})
    hc2, _, params2 = load_head(tmp_path, kind)
    assert hc2 == hc
    a, b = state_to_tensors(params, np.float16), state_to_tensors(params2)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name].astype(np.float32), b[name])


def test_the_corpus_vocabulary_is_the_tokens_seen_often_enough():
    ids = np.array([5, 1, 5, 9, 1, 5])
    assert corpus_vocabulary(ids, 12) == (1, 5, 9)
    assert corpus_vocabulary(ids, 12, min_count=2) == (1, 5)
    assert corpus_vocabulary(ids, 12, min_count=0) == ()  # () means the whole vocabulary


def test_an_unknown_head_kind_is_a_user_error():
    with pytest.raises(UserError, match="head kind"):
        HeadConfig.for_target("lookahead", ModelConfig.tiny())


def test_heads_learn_from_a_frozen_target(tmp_path):
    """Every head's validation loss falls, the target is untouched, MANIFEST says how."""
    train_tokenizer(tmp_path, vocab_size=320, corpus=SMALL_CORPUS)
    train(
        "tiny",
        tmp_path,
        tmp_path / "work",
        TrainConfig.preset("tiny"),
        corpus=SMALL_CORPUS,
        quiet=True,
    )
    before = state_to_tensors(load_model(tmp_path, "tiny")[2])
    hc = HeadsTrainConfig(steps=40, batch_size=4, seq_len=32, lr=3e-3, depth=3, eval_every=10)
    infos = train_heads(
        tmp_path,
        hc,
        SMALL_CORPUS,
        command="test",
        quiet=True,
        target="tiny",
        evaluate=lambda kind: {"measured": kind},
    )
    for kind in KINDS:
        curve = [v for _, v in infos[kind]["val_loss_curve"]]
        if kind == "medusa":
            # A 60-step tiny target's laws a few tokens ahead are nearly flat, so Medusa's heads
            # (zero-initialised: they start as the target's own next-token head) have almost
            # nothing to learn here: they must move, and not get worse.
            res = load_head(tmp_path, "medusa")[2]["res"]
            assert any(float(jnp.abs(get_value(res[i]["kernel"])).max()) > 0 for i in range(3))
            assert curve[-1] <= curve[0] + 1e-4, curve
        else:
            assert curve[-1] < curve[0] - 0.01, (kind, curve)
        entry = read_manifest(tmp_path)["models"][f"{kind}.safetensors"]
        assert entry["acceptance_on_validation"] == {"measured": kind}
        assert entry["params"] == infos[kind]["params"] > 0
        assert load_head(tmp_path, kind)[0].depth == 3
    after = state_to_tensors(load_model(tmp_path, "tiny")[2])
    assert all(np.array_equal(before[n], after[n]) for n in before)


@pytest.fixture(scope="module")
def target():
    cfg = ModelConfig.tiny(vocab_size=40, n_ctx=32)
    return (cfg, *nnx.split(GPT(cfg, nnx.Rngs(0))))


@pytest.mark.parametrize("kind", ["medusa", "mtp"])
def test_medusa_and_mtp_keep_the_targets_feature_at_L_minus_2(target, kind):
    cfg, g, p = target
    hc = HeadConfig.for_target(kind, cfg, depth=3)
    hg, hp = nnx.split(build(hc))
    drafter = DRAFTERS[kind](hg, hc, g)
    tokens = jnp.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 0, 0, 0]])
    lengths = jnp.array([6, 3])
    _, hidden, _ = forward(g, p, tokens, jnp.broadcast_to(jnp.arange(6), (2, 6)))
    feat = drafter.init((hp, p), tokens, lengths, hidden)
    np.testing.assert_array_equal(feat, hidden[jnp.arange(2), lengths - 2])
    # After a round from start = 5 that emitted 2 tokens, L = 8 and L−2 = 6 = block index 1.
    block_hidden = jnp.arange(2 * 4 * cfg.d_model, dtype=jnp.float32).reshape(2, 4, cfg.d_model)
    feat = drafter.commit(
        (hp, p),
        feat,
        block_hidden,
        jnp.zeros((2, 4), jnp.int32),
        jnp.array([5, 2]),
        jnp.array([7, 6]),
    )
    np.testing.assert_array_equal(feat[0], block_hidden[0, 0])  # 7 − 2 − 5 = 0
    np.testing.assert_array_equal(feat[1], block_hidden[1, 2])  # 6 − 2 − 2 = 2


def test_eagle_state_is_the_same_whether_read_at_once_or_round_by_round(target):
    """init over a whole prompt == init over its start, then commit of the rest as a block."""
    cfg, g, p = target
    hc = HeadConfig.for_target("eagle", cfg)
    hg, hp = nnx.split(build(hc, seed=3))
    drafter = DRAFTERS["eagle"](hg, hc, g)
    tokens = jnp.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    _, hidden, _ = forward(g, p, tokens, jnp.arange(8)[None])
    init = jax.jit(drafter.init)  # jitted: one program per shape, not one per operation
    (cache_a, f_a) = init((hp, p), tokens, jnp.array([8]), hidden)
    state = init((hp, p), tokens[:, :5], jnp.array([5]), hidden[:, :5])
    # The round's block starts at position 4 (the last committed token) and emitted 3 tokens.
    emitted = jnp.concatenate([tokens[:, 5:8], jnp.zeros((1, 1), jnp.int32)], 1)  # (1, γ+1)
    cache_b, f_b = jax.jit(drafter.commit)(
        (hp, p), state, hidden[:, 4:8], emitted, jnp.array([4]), jnp.array([8])
    )
    np.testing.assert_allclose(f_a, f_b, atol=1e-5)
    assert int(cache_a.length[0]) == int(cache_b.length[0]) == 7
    np.testing.assert_allclose(cache_a.k[0][:, :7], cache_b.k[0][:, :7], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_draft_vocabulary_bounds_what_a_head_drafts(target, kind):
    """Drafts and their laws stay inside the draft vocabulary, at T = 1 and greedy, and inside
    it the law is the full output layer's law renormalised."""
    cfg, g, p = target
    vocab = tuple(range(0, cfg.vocab_size, 3))
    hc = dataclasses.replace(HeadConfig.for_target(kind, cfg, depth=3), draft_vocab=vocab)
    hg, hp = nnx.split(build(hc, seed=4))
    hp = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(1), x.shape), hp)
    drafter = DRAFTERS[kind](hg, hc, g)
    full = DRAFTERS[kind](hg, dataclasses.replace(hc, draft_vocab=()), g)
    dp, dp_full = drafter.prepare(hp, p), full.prepare(hp, p)
    tokens = jnp.array([[1, 2, 3, 4, 5, 6]] * 64)
    _, hidden, _ = forward(g, p, tokens, jnp.broadcast_to(jnp.arange(6), tokens.shape))
    outside = np.setdiff1d(np.arange(cfg.vocab_size), vocab)
    for t in (1.0, 0.0):  # settings are traced: one program for both
        drafts, q = first_drafts(drafter, dp, tokens, hidden, SamplingParams.make(t))
        assert np.isin(np.asarray(drafts), vocab).all()
        np.testing.assert_array_equal(np.asarray(q)[..., outside], 0.0)
        np.testing.assert_allclose(np.asarray(q).sum(-1), 1.0, rtol=1e-5)
    # The first draft's law, over the vocabulary, is the whole layer's law renormalised.
    hot = SamplingParams.make(1.0)
    q_full = np.asarray(first_drafts(full, dp_full, tokens, hidden, hot)[1])[:, 0]
    q = first_drafts(drafter, dp, tokens, hidden, hot)[1]
    expected = q_full[:, list(vocab)] / q_full[:, list(vocab)].sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(q)[:, 0][:, list(vocab)], expected, rtol=1e-4, atol=1e-6)


@partial(jax.jit, static_argnums=0)
def first_drafts(drafter, dp, tokens, hidden, sp):
    """(drafts, laws) of a drafter's first 3 drafts after full-length prompts `tokens`, as one
    program (run op by op, init and propose compiled a program per operation)."""
    lengths = jnp.full(tokens.shape[0], tokens.shape[1])
    state = drafter.init(dp, tokens, lengths, hidden)
    seq = jnp.pad(tokens, ((0, 0), (0, 10)))
    drafts, q, _ = drafter.propose(dp, state, seq, lengths, jax.random.key(0), sp, 3)
    return drafts, q


@pytest.mark.parametrize("width", ["half", "full"])
def test_eagle_folds_its_projection_without_changing_its_law_or_its_next_input(target, width):
    """EAGLE drafts from h M + m and feeds h A + a + E[x] back in, made once at load
    (EagleFold); they must be the law of the projected feature f̂ = project(h) through the same
    pipeline, and fc([f̂ ; embed(x)]). Biases non-zero; a full-width layer folds the identity."""
    from nanospec.sampling import sampling_probs

    cfg, g, p = target
    hc = dataclasses.replace(
        HeadConfig.for_target("eagle", cfg), draft_vocab=tuple(range(0, cfg.vocab_size, 2))
    )
    if width == "full":
        hc = dataclasses.replace(hc, width=0)
    hg, hp = nnx.split(build(hc, seed=5))
    hp = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.key(2), x.shape), hp)
    drafter = DRAFTERS["eagle"](hg, hc, g)
    dp = drafter.prepare(hp, p)
    head, tmodel = drafter.parts(dp)
    assert (head.out is None) == (width == "full")
    h = jax.random.normal(jax.random.key(3), (5, head.cfg.d_model))
    for t in (1.0, 0.7):
        sp = SamplingParams.make(t)
        unfolded = sampling_probs(
            drafter.draft_logits(drafter.output_layer(tmodel), head.project(h)), sp
        )
        np.testing.assert_allclose(drafter.law(dp, h, sp), unfolded, rtol=1e-4, atol=1e-7)
    x = jnp.array([0, 7, 20, cfg.vocab_size - 1, 13])
    unfolded = head.fc(jnp.concatenate([head.project(h), tmodel.wte(x)], axis=-1))
    np.testing.assert_allclose(drafter.step_input(dp, h, x), unfolded, rtol=1e-4, atol=1e-5)
